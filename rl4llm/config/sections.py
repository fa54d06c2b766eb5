"""Every field of a run's config, once: one frozen dataclass per section, each field with its default, a one-line
doc and its bound (`fields.param`). `RunConfig` is what the training stack reads (`rl4llm.config.parse`); the
command line and `configs/*.py` edit its ml_collections form (`rl4llm.config.defaults()`), parsed once per job.

Print every field with its default, bound and doc: `python -m rl4llm.config`.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from rl4llm import envs as envs_lib
from rl4llm import models
from rl4llm import rewards
from rl4llm.config.fields import AtLeast, Between, Boolean, OneOf, Satisfies, param
from rl4llm.data import arithmetic as arithmetic_lib
from rl4llm.data import selection as selection_lib
from rl4llm.data import tasks
from rl4llm.parallel import mesh as mesh_lib
from rl4llm.rewards import combine as combine_lib
from rl4llm.rewards import length as length_lib
from rl4llm.rewards import pipeline as pipeline_lib
from rl4llm.rewards import process as process_lib
from rl4llm.rl import aggregation
from rl4llm.rl import kl as kl_lib
from rl4llm.rl import preference as preference_lib
from rl4llm.rl import process as process_rl
from rl4llm.rl import registry
from rl4llm.sampling import tree as sampling_tree
from rl4llm.verifiers import referee as referee_lib
from rl4llm.verifiers import templates

LR_SCHEDULES = ("constant", "cosine")  # after the warm-up; cosine decays to 0 at the stage's last update
DTYPES = ("float32", "bfloat16")
_section = dataclasses.dataclass(frozen=True)


def _increasing_fractions(values) -> bool:
    values = tuple(values)
    return bool(values) and all(0 < f <= 1 for f in values) and list(values) == sorted(values)


@_section
class Task:
    """The task (rl4llm.data.tasks) and its reward pipeline (rl4llm.rewards.pipeline). The arithmetic fields are
    here; every other task reads its own sub-section (`task.countdown.max_numbers`, ...)."""

    name: str = param("arithmetic", "rl4llm.data.tasks.TASKS name", OneOf(tasks.TASKS))
    min_operands: int = param(4, "arithmetic: fewest operands of a prompt ('3+7-5+8=' has 4)", AtLeast(2))
    max_operands: int = param(4, "arithmetic: most operands", AtLeast(2))
    max_value: int = param(9, "arithmetic: largest operand", AtLeast(1))
    operators: str = param("+-", "arithmetic: the operators drawn",
                           Satisfies(lambda v: bool(v) and not set(v) - set("+-*"), "must be a non-empty subset of '+-*'"))
    test_fraction: float = param(0.1, "arithmetic: share of the prompt space held out", Between(0.0, 0.5, low_open=True))
    reward: str = param("exact_answer", "the main reward (rl4llm.rewards.REWARDS)", OneOf(rewards.REWARDS))
    countdown: dict = param(tasks.section_defaults("countdown"), "task 'countdown' (rl4llm.data.countdown)")
    sorting: dict = param(tasks.section_defaults("sorting"), "task 'sorting' (rl4llm.data.sorting)")
    modular: dict = param(tasks.section_defaults("modular"), "task 'modular' (rl4llm.data.modular)")
    local: dict = param(tasks.section_defaults("local"), "task 'local': JSONL/JSON/Parquet/TFDS (rl4llm.data.local)")
    extra_rewards: str = param("", "extra weighted reward components 'name:weight,...' (rl4llm.rewards.combine)")
    extra_rewards_mode: str = param("sum", "extra rewards added always ('sum') or to correct answers ('if_correct')",
                                    OneOf(combine_lib.COMBINE_MODES))
    length_shaping: str = param("none", "rl4llm.rewards.length.LENGTH_SHAPING name, or 'none'",
                                OneOf(("none", *length_lib.LENGTH_SHAPING)))
    length_shaping_kwargs: dict = param({}, "the length shaper's hyper-parameters that are set (None: its default)",
                                        placeholders=(length_lib.LENGTH_SHAPING, length_lib.STANDARD_INPUTS))
    pseudo_labels: str = param("none", "'majority_vote': label-free rewards against the group's majority (TTRL)",
                               OneOf(pipeline_lib.PSEUDO_LABELS))
    flaw_judge: str = param("none", "a process judge (rl4llm.rewards.process.JUDGES): logs judge/* (flawed positives: "
                            "right answers from flawed steps) in training and evaluation", OneOf(("none", *process_lib.JUDGES)))
    flaw_penalty: float = param(0.0, "FAPO: subtracted from a flawed positive's reward (0: the judge only monitors; "
                                "FAPO's lambda 1 on +-1 rewards = 0.5 on 0/1 rewards)", Between(0.0, 1e6))
    step_reward: str = param("none", "process rewards from the judge's step labels on the step-end tokens "
                             "(rl4llm.rl.process.STEP_REWARDS: prm, prm_clip, prm_delta, thought), for an estimator that "
                             "takes them (rl.advantage='process_grpo')", OneOf(("none", *process_rl.STEP_REWARDS)))
    step_reward_eta: float = param(0.5, "PRM Clip's threshold eta: step rewards min(s - eta, 0)", Between(0.0, 1.0))
    step_reward_model: str = param("", "a learned PRM's directory (rl4llm.process_reward_model; experiments/"
                                   "train_reward_model.py with reward_model.objective='process') whose step scores "
                                   "replace the judge's labels in step_reward; '' = the judge's labels",
                                   Satisfies(lambda v: not v or os.path.isdir(v),
                                             "not a directory (experiments/train_reward_model.py writes one)"))
    reward_workers: int = param(0, "> 0: score in that many processes with a hard per-call timeout (0: inline)",
                                AtLeast(0))
    reward_timeout_s: float = param(30.0, "a scoring call's time limit", Between(0.0, 1e6, low_open=True))


@_section
class Lora:
    """LoRA (rl4llm.models.lora): rank > 0 trains only low-rank adapters; the base is frozen and, with KL on, is
    the reference policy (adapters off: no second copy)."""

    rank: int = param(0, "adapter rank; 0 = full fine-tuning", AtLeast(0))
    alpha: float = param(16.0, "scale alpha / rank of the adapters' output", Between(0.0, 1e6, low_open=True))
    targets: tuple = param(models.LORA_TARGETS, "projections that get adapters",
                           Satisfies(lambda v: isinstance(v, tuple) and bool(v) and not set(v) - set(models.LORA_TARGETS),
                                     f"must be a non-empty tuple of {', '.join(models.LORA_TARGETS)}"))


@_section
class Model:
    """The decoder (rl4llm.models): a preset, or a Hugging Face checkpoint; precision; remat; LoRA."""

    preset: str = param("arith", "rl4llm.models.PRESETS name (vocab_size comes from the tokenizer)",
                        OneOf(models.PRESETS))
    hf_checkpoint: str = param("", "a HF model dir (Qwen2/2.5, Qwen3, Llama 3.x): replaces preset and tokenizer")
    export_hf: bool = param(False, "write the final policy (LoRA merged) to <workdir>/hf_export", Boolean())
    dtype: str = param("float32", "activations / matmuls (norms, softmax, log-probs, losses are float32 always)",
                       OneOf(DTYPES))
    param_dtype: str = param("float32", "stored params = the optimizer's master weights", OneOf(DTYPES))
    remat: str = param("none", "what the backward keeps per block: none (all), full (block inputs), dots (matmuls)",
                       OneOf(models.REMAT_MODES))
    lora: Lora = param(Lora, "LoRA adapters")


@_section
class Sampling:
    """Rollouts (rl4llm.sampling). Prompts are left-padded to a multiple of prompt_bucket."""

    temperature: float = param(1.0, "sampling temperature of the rollouts", Between(0.0, 100.0, low_open=True))
    top_k: int = param(0, "keep the k most likely tokens (0: all)", AtLeast(0))
    top_p: float = param(1.0, "nucleus sampling mass", Between(0.0, 1.0, low_open=True))
    min_p: float = param(0.0, "min-p: keep tokens with p >= min_p * max p, after top-k/top-p (0: off)",
                         Between(0.0, 1.0))
    temperature_tau: float = param(0.0, "HAPO adaptive temperature: token t drawn at temperature*(1 + tau*h_t), h_t "
                                   "in [-1, 1] its logits' entropy score under the previous RL step's statistics "
                                   "(rl.entropy.normalized_entropy_stats; 0: off; HAPO: 0.05)", Between(0.0, 0.99))
    temperature_pivot: float = param(0.8, "HAPO adaptive temperature: the log-entropy quantile that scores h = 0 "
                                     "(HAPO's entropy_pivot)", Between(0.0, 1.0))
    max_new_tokens: int = param(32, "the response budget", AtLeast(1))
    shared_prefix_prefill: bool = param(False, "prefill each prompt once, fork its KV cache to its G rows "
                                        "(fewer FLOPs; rounds differently from the G prefills)", Boolean())
    prompt_bucket: int = param(16, "prompt lengths are multiples of this (few compiled shapes)", AtLeast(1))
    rows_per_call: int = param(0, "rows per sampler call: the step's groups go R / G prompts at a time through one "
                               "compiled program, the KV cache of R rows (0: all rows in one call)", AtLeast(0))


@_section
class SFT:
    """The supervised warm start on the task's reference solutions. 450 steps: the policy has learned the procedure
    but still slips on single facts (greedy ~0.57, pass@1 ~0.46); at 300 it has not, and RL has little to
    reinforce (+6 points in 150 steps, measured)."""

    steps: int = param(450, "SFT steps (0: start RL from the initial params)", AtLeast(0))
    batch_size: int = param(64, "sequences per step", AtLeast(1))
    learning_rate: float = param(3e-3, "AdamW peak learning rate", Between(0.0, 1.0, low_open=True))
    warmup_steps: int = param(20, "linear warm-up steps", AtLeast(0))
    lr_schedule: str = param("constant", "after the warm-up: constant | cosine (to 0)", OneOf(LR_SCHEDULES))
    weight_decay: float = param(0.0, "AdamW weight decay", Between(0.0, 1.0))
    grad_clip: float = param(1.0, "global gradient-norm clip", Between(0.0, 1e9))


@_section
class RL:
    """The RL stage: kernels by registry name (rl4llm.rl.registry), the learner (rl4llm.train.learner), KL /
    entropy control, importance sampling, asynchronous rollouts and the update schedule. The main job takes ONE
    on-policy update per step (ratio 1: the clip never binds, the gradient is REINFORCE's with GRPO advantages);
    the recipes take their papers' schedules, old log-probs coming from a behaviour pass."""

    steps: int = param(100, "RL steps", AtLeast(0))
    num_prompts: int = param(16, "prompts per step", AtLeast(1))
    num_generations: int = param(16, "completions per prompt (the group)", AtLeast(1))
    advantage: str = param("grpo", "advantage estimator (registry.ADVANTAGES)", OneOf(registry.ADVANTAGES))
    advantage_kwargs: dict = param({}, "the estimator's hyper-parameters that are set (None: its default)",
                                   placeholders=(registry.ADVANTAGES, registry.ADVANTAGE_INPUTS))
    loss: str = param("ppo_clip", "policy loss (registry.POLICY_LOSSES)", OneOf(registry.POLICY_LOSSES))
    loss_kwargs: dict = param({}, "the loss's hyper-parameters that are set (None: its default)",
                              placeholders=(registry.POLICY_LOSSES, registry.LOSS_INPUTS))
    agg_mode: str = param("token-mean", "loss aggregation (rl4llm.rl.aggregation)", OneOf(aggregation.AGG_MODES))
    agg_norm_length: int = param(0, "C of seq-mean-token-sum-norm (Dr.GRPO); 0 = the run's response budget",
                                 AtLeast(0))
    kl_coef: float = param(0.0, "> 0: KL to the frozen warm-start policy in the loss", Between(0.0, 1e3))
    kl_kind: str = param("k3", "KL estimator (rl4llm.rl.kl)", OneOf(kl_lib.KINDS))
    entropy_coef: float = param(0.0, "entropy bonus coefficient", Between(-1e3, 1e3))
    kl_in_reward: bool = param(False, "the KL penalty goes into the token reward (verl use_kl_in_reward)", Boolean())
    kl_target: float = param(0.0, "> 0: adaptive KL coefficient toward this KL (Ziegler controller)",
                             Between(0.0, 1e3))
    kl_horizon: int = param(10000, "horizon of the adaptive KL controller, in sequences", AtLeast(1))
    ref_reset_every: int = param(0, "> 0: every n steps reference <- policy, optimizer re-initialised (ProRL)",
                                 AtLeast(0))
    entropy_target: float = param(0.0, "> 0: adaptive entropy_coef toward this mean entropy (Skywork-OR1)",
                                  Between(0.0, 1e3))
    entropy_coef_delta: float = param(0.005, "step of the adaptive entropy coefficient", Between(0.0, 1.0))
    token_selection: str = param("all", "'high_entropy': gradient only on the top-rho entropy tokens (80/20); "
                                 "'advantage_entropy': on the top-rho tokens by |A|*H (D3S's token level)",
                                 OneOf(("all", "high_entropy", "advantage_entropy")))
    token_selection_rho: float = param(0.2, "share of tokens kept by high_entropy / advantage_entropy (the start "
                                       "of downsample_anneal_steps' schedule)", Between(0.0, 1.0, low_open=True))
    rollout_selection: str = param("all", "'max_variance': train on the rollouts whose advantages have the largest "
                                   "variance (D3S's sample level, rl4llm.rl.downsampling)",
                                   OneOf(("all", "max_variance")))
    rollout_selection_frac: float = param(0.5, "share of rollouts kept by max_variance (the schedule's start)",
                                          Between(0.0, 1.0, low_open=True))
    rollout_selection_scope: str = param("batch", "max_variance over the whole batch (D3S) or within each group "
                                         "(D3S-I)", OneOf(("batch", "group")))
    downsample_anneal_steps: int = param(0, "> 0: the kept shares of max_variance and advantage_entropy rise "
                                         "linearly to 1 over this many RL steps (D3S's schedule; 0: constant)",
                                         AtLeast(0))
    proxy_min_p: float = param(0.02, "Lp-Reg: min-p of the proxy distribution (losses taking proxy_logp)",
                               Between(0.0, 1.0, low_open=True))
    tis_cap: float = param(0.0, "> 0: truncated IS min(pi_learner / pi_sampler, cap) on the loss", Between(0.0, 1e9))
    tis_level: str = param("token", "truncated IS per token or per sequence", OneOf(("token", "sequence")))
    async_rollouts: bool = param(False, "generate the next batches in a background thread (needs tis_cap > 0)",
                                 Boolean())
    max_staleness: int = param(1, "async: most RL steps between the generating and the learning params", AtLeast(1))
    off_policy_traces: int = param(0, "k of each group's rows are the task's reference solution (or config.teacher's "
                                   "traces), off-policy (LUFFY; needs a loss taking off_policy_mask); 0: all sampled",
                                   AtLeast(0))
    ppo_epochs: int = param(1, "passes over each rollout batch", AtLeast(1))
    num_minibatches: int = param(1, "optimizer updates per pass", AtLeast(1))
    micro_batch_size: int = param(0, "0: the whole minibatch at once; else gradient accumulation", AtLeast(0))
    learning_rate: float = param(1e-4, "AdamW peak learning rate", Between(0.0, 1.0, low_open=True))
    warmup_steps: int = param(5, "linear warm-up, in updates", AtLeast(0))
    lr_schedule: str = param("constant", "after the warm-up: constant | cosine (to 0 at the last update)",
                             OneOf(LR_SCHEDULES))
    weight_decay: float = param(0.0, "AdamW weight decay", Between(0.0, 1.0))
    grad_clip: float = param(1.0, "global gradient-norm clip", Between(0.0, 1e9))
    logprob_chunk_size: int = param(64, "sequence positions per log-prob chunk", AtLeast(1))
    logprob_vocab_chunk_size: int = param(0, "> 0: vocabulary entries per logsumexp / entropy chunk", AtLeast(0))
    shared_prompt_forward: bool = param(True, "the learner forwards each group's prompt once for its G rows when the "
                                        "rows allow it (config.validation.shared_prompt_group)", Boolean())


@_section
class Critic:
    """PPO's value model (rl4llm.models.value_head, train.companions.critic), trained when rl.advantage is one
    of registry.RETURNS_VALUE_TARGETS ("gae")."""

    shared_trunk: bool = param(False, "a value head on the policy's decoder (one joint step); False: own decoder",
                               Boolean())
    checkpoint: str = param("", "Orbax critic params (value_head.save_critic); '' = initialise from the policy",
                            Satisfies(lambda v: not v or os.path.isdir(v),
                                      "not a directory (value_head.save_critic writes one)"))
    learning_rate: float = param(1e-4, "its own AdamW's learning rate", Between(0.0, 1.0, low_open=True))
    lr_warmup_steps: int = param(0, "its learning-rate warm-up", AtLeast(0))
    weight_decay: float = param(0.0, "its AdamW weight decay", Between(0.0, 1.0))
    grad_clip: float = param(1.0, "its gradient-norm clip", Between(0.0, 1e9))
    cliprange_value: float = param(0.5, "value clip (verl critic.cliprange_value)", Between(0.0, 1e9, low_open=True))
    value_loss_coef: float = param(0.1, "shared trunk: weight of the value loss in the trunk's gradient (TRL vf_coef)",
                                   Between(0.0, 1e3))
    warmup_steps: int = param(0, "the first RL steps update only the critic", AtLeast(0))


SCALAR_REWARD_MODEL_OBJECTIVES = ("bradley_terry", "bce")  # rl4llm.reward_model.OBJECTIVES
# "process": a PRM (rl4llm.process_reward_model) trained on the step judge's labels of each step;
# "judge": a generative verifier (rl4llm.verifiers.generative) trained on the pairs' verdicts; "critique": a critique
# judge (rl4llm.verifiers.critique) fine-tuned on the step judge's procedural critiques (rl4llm.train.critique_job)
REWARD_MODEL_OBJECTIVES = (*SCALAR_REWARD_MODEL_OBJECTIVES, "process", "judge", "critique")


@_section
class RewardModel:
    """An outcome reward model (rl4llm.reward_model: a decoder of config.model + a scalar head): trained by
    experiments/train_reward_model.py (the training fields), and, when `checkpoint` is set, scoring the RL
    rollouts in one batched jitted call (rl4llm.train.rollouts)."""

    checkpoint: str = param("", "RL: the RM directory (reward_model.save) scoring rollouts; '' = no RM",
                            Satisfies(lambda v: not v or os.path.isdir(v),
                                      "not a directory (experiments/train_reward_model.py writes one)"))
    mode: str = param("replace", "RL: the reward is weight*score ('replace') or rule reward + weight*score ('add')",
                      OneOf(combine_lib.REWARD_MODEL_MODES))
    weight: float = param(1.0, "RL: the RM score's weight in the reward", Between(-1e6, 1e6))
    co_train: bool = param(False, "RL: train the RM with the policy (Cooper): a Bradley-Terry step per RL step on the "
                           "groups' verifier-accepted vs -rejected completions (co_train_pairs), with the training "
                           "fields (learning_rate, weight_decay, grad_clip, margin)", Boolean())
    co_train_pairs: str = param("all", "RL co-training: every (accepted, rejected) pair of a group ('all', InstructGPT's "
                                "K-choose-2 comparisons) or only the one the RM orders worst ('hardest')",
                                OneOf(("all", "hardest")))
    init_from: str = param("", "training: an experiments.train workdir whose SFT policy (and tokenizer) the trunk "
                           "starts from (InstructGPT); '' = config.model's init",
                           Satisfies(lambda v: not v or os.path.isdir(os.path.join(v, "checkpoints", "sft")),
                                     "has no checkpoints/sft (run experiments.train there first)"))
    objective: str = param("bradley_terry", "training: preference pairs (Bradley-Terry), verifier labels (bce), "
                           "a PRM on the step judge's labels (process; per-step BCE), a generative verifier's "
                           "Yes/No verdicts (judge; config.generative_verifier's template), or a critique judge's "
                           "critiques (critique: SFT on the step judge's procedural critiques)",
                           OneOf(REWARD_MODEL_OBJECTIVES))
    steps: int = param(200, "training: optimizer updates", AtLeast(1))
    batch_size: int = param(32, "training: preference pairs per update (bce, process: 2x as many sequences)",
                            AtLeast(1))
    learning_rate: float = param(1e-3, "training: AdamW peak learning rate", Between(0.0, 1.0, low_open=True))
    warmup_steps: int = param(10, "training: linear warm-up steps", AtLeast(0))
    weight_decay: float = param(0.0, "training: AdamW weight decay", Between(0.0, 1.0))
    grad_clip: float = param(1.0, "training: global gradient-norm clip", Between(0.0, 1e9))
    sample_from: str = param("", "training: an experiments.train workdir whose policy's own completions, labelled by "
                             "the verifier (process: by the step judge), give the pairs ('' = reference vs corrupted "
                             "solutions)")
    sample_prompts: int = param(512, "training with sample_from: training prompts sampled (G = rl.num_generations "
                                "each) into the pool of pairs", AtLeast(1))
    corruption: str = param("final_answer", "training: the rejected solution's error (data.arithmetic.wrong_solution)",
                            OneOf(arithmetic_lib.CORRUPTIONS))
    margin: float = param(0.0, "training: Bradley-Terry margin m in -log sigmoid(r_c - r_r - m) (Llama 2)",
                          Between(0.0, 1e3))
    eval_pairs: int = param(256, "training: held-out preference pairs of the pairwise accuracy (process: held-out "
                            "problems whose steps give the step accuracy and AUC)", AtLeast(1))
    eval_every: int = param(50, "training: updates between held-out evaluations (and at the end)", AtLeast(1))


GENERATIVE_VERIFIER_NORMALISATIONS = ("full", "yes_no")  # rl4llm.verifiers.generative.judge_probabilities
GENERATIVE_VERIFIER_KINDS = ("p_yes", "critique")  # rl4llm.verifiers.generative / rl4llm.verifiers.critique


@_section
class GenerativeVerifier:
    """A generative verifier, scoring the RL rollouts when `checkpoint` or `hf_checkpoint` is set: kind "p_yes"
    (rl4llm.verifiers.generative), a decoder prompted with `template` whose reward is P(yes_token) as its next token
    (the soft verifier of arXiv 2503.23829), one batched jitted forward; kind "critique" (rl4llm.verifiers.critique,
    DeepSeek-GRM), a decoder that writes `samples` critiques of at most `max_critique_length` tokens at
    `temperature` after the same judge text, each ending in a score in [1, 10], parsed strictly and summed; the
    reward is the sum mapped to [0, 1] (one batched jitted sampling call)."""

    kind: str = param("p_yes", "the judge: P(yes_token) of its next token ('p_yes') or sampled critiques ending in a "
                      "parsed score, summed ('critique')", OneOf(GENERATIVE_VERIFIER_KINDS))

    checkpoint: str = param("", "a verifier directory (verifiers.generative.save), on the run's tokenizer; '' = none",
                            Satisfies(lambda v: not v or os.path.isdir(v),
                                      "not a directory (verifiers.generative.save writes one)"))
    hf_checkpoint: str = param("", "or an HF model directory (config.json, safetensors, tokenizer.json) as the judge",
                               Satisfies(lambda v: not v or os.path.isdir(v), "not a directory"))
    template: str = param(templates.DEFAULT_TEMPLATE, "the judge text: {question}, {reference}, one {completion}")
    yes_token: str = param("Yes", "p_yes: the judgement token whose probability is the reward (one token)")
    no_token: str = param("No", "p_yes: the other judgement token (one token)")
    normalisation: str = param("full", "p_yes: P(Yes) under the whole next-token softmax (the paper's) or over "
                               "{Yes, No}",
                               OneOf(GENERATIVE_VERIFIER_NORMALISATIONS))
    hard: bool = param(False, "p_yes: reward 1[P(Yes) >= threshold] instead of P(Yes)", Boolean())
    threshold: float = param(0.5, "p_yes, hard: the verdict's threshold on P(Yes)", Between(0.0, 1.0))
    max_length: int = param(1024, "the judge text's most tokens (longer: the completion's start is cut)", AtLeast(8))
    mode: str = param("replace", "the reward is weight*score ('replace') or rule reward + weight*score ('add')",
                      OneOf(combine_lib.REWARD_MODEL_MODES))
    weight: float = param(1.0, "the verifier score's weight in the reward", Between(-1e6, 1e6))
    samples: int = param(1, "critique: k critiques sampled per completion, their scores summed (the paper's voting)",
                         AtLeast(1))
    temperature: float = param(0.0, "critique: the critiques' sampling temperature (0: greedy, then samples=1)",
                               Between(0.0, 10.0))
    max_critique_length: int = param(48, "critique: a critique's most tokens (one that does not stop by then is not "
                                     "parsable: it votes the minimum score)", AtLeast(4))


def _is_referee_template(template) -> bool:
    try:
        referee_lib.template_pieces(template)
    except (ValueError, TypeError):
        return False
    return True


@_section
class Urpo:
    """URPO (Lu et al. 2025, arXiv 2507.17515; rl4llm.train.urpo, rl4llm.verifiers.referee): the policy is player and
    referee in one GRPO loop. referee_share of each step's groups are referee groups: a problem and a candidate
    solution in `template`; the policy writes a verdict (yes_token / no_token first), rewarded 1 when it agrees with
    the verifier's label (garbage: 0). With self_reward the player groups are rewarded by the policy's own greedy
    verdict instead of the verifier (the paper's open-ended tasks). eval_pairs > 0 measures the referee on held-out
    reference vs corrupted solutions at every evaluation (any arithmetic run, URPO or not)."""

    referee_share: float = param(0.0, "share of each step's rl.num_prompts groups that are referee groups (a whole "
                                 "number of groups); 0 = off", Between(0.0, 1.0))
    rollout_candidates: float = param(0.5, "share of the referee groups whose candidate is one of the step's own "
                                      "rollouts (the rest: the reference solution or a corruption of it, 50/50)",
                                      Between(0.0, 1.0))
    corruption: str = param("final_answer", "how a reference solution is made wrong (data.arithmetic.wrong_solution)",
                            OneOf(arithmetic_lib.CORRUPTIONS))
    template: str = param(referee_lib.DEFAULT_TEMPLATE, "the referee prompt: {question} and one {completion}",
                          Satisfies(_is_referee_template, "needs {question} and exactly one {completion}, no "
                                    "other field"))
    yes_token: str = param("1", "the verdict 'correct': the referee's completion starts with it",
                           Satisfies(lambda v: isinstance(v, str) and bool(v), "must be non-empty"))
    no_token: str = param("0", "the verdict 'wrong'", Satisfies(lambda v: isinstance(v, str) and bool(v),
                                                                 "must be non-empty"))
    self_reward: bool = param(False, "player groups rewarded by the policy's own greedy verdict (1 = 'correct'), "
                              "not the verifier", Boolean())
    eval_pairs: int = param(0, "held-out problems whose reference and corrupted solutions the referee judges at each "
                            "evaluation (greedy); 0 = none", AtLeast(0))


@_section
class Prime:
    """PRIME's implicit PRM (rl4llm.rl.prime, train.companions.prime), trained when rl.advantage="prime"."""

    beta: float = param(0.05, "r_t = beta * (log pi_phi - log pi_ref)", Between(0.0, 1e3, low_open=True))
    learning_rate: float = param(1e-4, "the PRM's own AdamW", Between(0.0, 1.0, low_open=True))
    weight_decay: float = param(0.0, "its AdamW weight decay", Between(0.0, 1.0))
    grad_clip: float = param(1.0, "its gradient-norm clip", Between(0.0, 1e9))


@_section
class Relift:
    """ReLIFT (Ma et al. 2025, "Learning What RL Can't: Interleaved Online Fine-Tuning for Hardest Questions";
    train.companions.relift): the questions all of whose rollouts fail join a buffer with their reference solution;
    after an RL step whose buffer holds batch_size of them, one SFT step on the newest batch_size (its own AdamW), and
    they leave the buffer."""

    batch_size: int = param(0, "questions per SFT step (ReLIFT's sft_data_size, 128 in its scripts); 0: off",
                            AtLeast(0))
    capacity: int = param(64, "buffer rows (the oldest are dropped beyond it; ReLIFT's buffer is unbounded)",
                          AtLeast(1))
    prompt_tokens: int = param(64, "the buffer's prompt width: a longer prompt is not buffered (relift/too_long)",
                               AtLeast(1))
    learning_rate: float = param(1e-4, "the SFT step's own AdamW (ReLIFT: the RL learning rate)",
                                 Between(0.0, 1.0, low_open=True))
    grad_clip: float = param(1.0, "its gradient-norm clip", Between(0.0, 1e9))
    entropy_coef: float = param(0.001, "L = token-mean NLL - entropy_coef * token-mean entropy (ReLIFT: 0.001)",
                                Between(0.0, 1e3))


@_section
class Teacher:
    """Where the off-policy traces of `rl.off_policy_traces` come from in place of the task's reference solutions
    (LUFFY's guidance, `rl4llm.train.teacher`): a stronger model, each step k completions of every prompt drawn from
    it, decoded to text and re-encoded with the policy's tokenizer (so any tokenizer will do); or a file of trace
    texts (`traces_path`, format in `rl4llm.data.trace_file`), k drawn per prompt each step and re-encoded likewise."""

    checkpoint: str = param("", "an rl4llm run's workdir: its newest RL checkpoint, else its SFT one; '' = none",
                            Satisfies(lambda v: not v or os.path.isdir(v), "not a directory"))
    hf_checkpoint: str = param("", "or an HF model directory (config.json, safetensors, tokenizer.json)",
                               Satisfies(lambda v: not v or os.path.isdir(v), "not a directory"))
    temperature: float = param(1.0, "the teacher's sampling temperature (0: greedy, k equal traces)",
                               Between(0.0, 100.0))
    traces_path: str = param("", "or a JSONL file of traces, {\"prompt\": <the rendered prompt>, \"traces\": "
                             "[<completion>, ...]} a line (rl4llm.data.trace_file); '' = none",
                             Satisfies(lambda v: not v or (os.path.isfile(v) and os.access(v, os.R_OK)),
                                       "not a readable file"))


PREFERENCE_LOSSES = ("none", "dpo", "cpl", "p3o", "dmpo", "sdpo")  # rl4llm.train.preference_step


@_section
class Preference:
    """Pairwise preference objectives in the RL loop (rl4llm.train.preference_step): each group's best vs worst
    completion by the reward (rl4llm.rl.preference.pairs_from_groups) is a pair, and the pairwise loss replaces
    rl.loss: online DPO against the reference policy (Guo et al. 2024; with rl.ref_reset_every the reference is the
    previous iterate: DNO, DPO-VP), CPL (Hejna et al. 2023, reference-free) or P3O (Wu et al. 2023, clipped pairwise
    policy gradient on the reward difference); in agent runs (agent.env) on each task's episodes, best vs worst by
    the episode return (outcome + turn rewards): DMPO (Shi et al. 2024, turn-weighted DPO) or SDPO (Kong et al.
    2025, DPO on a segment of turns from the pair's first divergent turn)."""

    loss: str = param("none", "the pair loss on each group's best-vs-worst pair that replaces rl.loss: dpo | cpl | "
                      "p3o (single-turn runs), dmpo | sdpo (agent runs); 'none': off", OneOf(PREFERENCE_LOSSES))
    kind: str = param("sigmoid", "DPO variant: sigmoid | cdpo | robust | ipo (rl4llm.rl.preference.dpo_loss)",
                      OneOf(preference_lib.DPO_KINDS))
    beta: float = param(0.1, "beta of DPO (IPO's tau), DMPO and SDPO; TRL's default", Between(0.0, 1e3, low_open=True))
    label_smoothing: float = param(0.0, "epsilon, the label-flip probability of cdpo / robust (and sigmoid); 0: off",
                                   Between(0.0, 0.5))
    alpha: float = param(0.1, "CPL: temperature alpha of a segment's score alpha * sum_k gamma^k log pi (official "
                         "configs: 0.1)", Between(0.0, 1e3, low_open=True))
    conservative_bias: float = param(0.5, "CPL: lambda on the rejected segment's score, softplus(lambda S_r - S_c); "
                                     "1: unbiased (official configs: 0.5)", Between(0.0, 1.0, low_open=True))
    discount: float = param(1.0, "CPL: gamma over a segment's tokens (official code: 1, undiscounted)",
                            Between(0.0, 1.0, low_open=True))
    clip_ratio: float = param(0.2, "P3O: epsilon of the sequence-ratio clip", Between(0.0, 1.0, low_open=True))
    clip_mode: str = param("joint", "P3O: joint (V2, the pair ratio clipped once) | separate (V1, each response's "
                           "ratio clipped)", OneOf(preference_lib.P3O_CLIP_MODES))
    turn_discount: float = param(0.7, "DMPO: gamma of the turn weight phi(j, T) = gamma^j (1 - gamma^(T-j)) / "
                                 "(1 - gamma^T) (official trainer: 0.7)", Between(0.0, 1.0, low_open=True))
    segment_turns: int = param(2, "SDPO: k, the turns of the segment from the pair's first divergent turn (truncated "
                               "to the turns both episodes have; the paper's judge picks k per pair)", AtLeast(1))


REWARD_WEIGHTING = ("none", "dynamic", "constrained")  # rl4llm.train.companions.reward_weighting


@_section
class RewardWeighting:
    """Weights of the reward components (the main reward, then config.task.extra_rewards) that change from step to
    step (rl4llm.rl.reward_weighting, train.companions.reward_weighting). 'dynamic': dynamic reward weighting (Lu et
    al. 2025): r = sum_k w_k r_k, w on the simplex, moved each accumulation_steps RL steps by mirror descent on each
    reward's gradient influence; the extra_rewards weights (1, w_1, ...) normalised are the initial w. 'constrained':
    constrained RLHF (Moskovitz et al. 2024): maximise the main reward subject to mean(component) >= threshold for
    each component in `thresholds`, advantage A_main + sum_i lambda_i A_i, lambda_i >= 0 by projected gradient steps
    on the violation (the extra_rewards weights then only shape the logged combined reward)."""

    method: str = param("none", "none | dynamic | constrained", OneOf(REWARD_WEIGHTING))
    regularization: float = param(1e-5, "dynamic: w <- softmax(log w + lr_t * influence / regularization), lr_t the "
                                  "policy's learning rate (released runs: 1e-5 at lr 1e-6)",
                                  Between(0.0, 1e9, low_open=True))
    accumulation_steps: int = param(1, "dynamic: RL steps whose influences are averaged per weight update", AtLeast(1))
    thresholds: str = param("", "constrained: 'name:threshold,...', each name an extra reward whose batch mean must "
                            "stay >= threshold")
    multiplier_lr: float = param(1e-2, "constrained: lambda <- clip(lambda + lr * (threshold - mean), 0, max) "
                                 "(official lagrange_lr)", Between(0.0, 1e6, low_open=True))
    multiplier_init: float = param(0.0, "constrained: every lambda's initial value", Between(0.0, 1e6))
    multiplier_max: float = param(0.0, "constrained: lambda's upper bound; 0: none", Between(0.0, 1e9))
    normalize: bool = param(False, "constrained: (A_main + sum lambda_i A_i) / (1 + sum lambda_i) instead of the sum",
                            Boolean())


@_section
class Selection:
    """Prompt selection, replay, rollout allocation, hints, curriculum (rl4llm.data.selection and neighbours)."""

    method: str = param("uniform", "uniform | dynamic_sampling (DAPO) | accuracy_band (PRIME) | dots | bots | insight "
                        "| knapsack | adaptive_difficulty (RLVE) | scaler (SCALER) | std_filter (StarPO-S) "
                        "| low_likelihood (SELF) | prof (PROF) | exit (ExIt)", OneOf(selection_lib.METHODS))
    max_gen_rounds: int = param(3, "dynamic_sampling / accuracy_band / low_likelihood: generation (low_likelihood: "
                                "greedy probe) rounds per step", AtLeast(1))
    acc_low: float = param(0.2, "accuracy_band: keep groups with acc_low <= mean correctness", Between(0.0, 1.0))
    acc_high: float = param(0.8, "accuracy_band: ... <= acc_high", Between(0.0, 1.0))
    pool_size: int = param(1024, "dots / bots / insight / knapsack: prompts with per-prompt statistics", AtLeast(1))
    target: float = param(0.5, "dots / bots / SEELE's hints: target success rate", Between(0.0, 1.0))
    dots_temperature: float = param(1e-3, "DOTS: softmax(-|p - target| / tau) without replacement",
                                    Between(0.0, 1e3, low_open=True))
    bots_temperature: float = param(0.0, "BOTS / InSight: 0 = top-k of the Thompson / information scores", Between(0.0, 1e3))
    bots_decay: float = param(0.1, "BOTS / InSight lambda (forgetting toward the prior)", Between(0.0, 1.0))
    bots_implicit_weight: float = param(0.1, "BOTS / InSight rho (weight of the implicit evidence)", Between(0.0, 1.0))
    bots_prior: float = param(1.0, "BOTS / InSight alpha_0 = beta_0", Between(0.0, 1e6, low_open=True))
    replay_capacity: int = param(0, "dots / bots / insight: > 0 replays groups from a FIFO buffer of this many (DOTS: 512)",
                                 AtLeast(0))
    replay_fresh_fraction: float = param(0.5, "fresh groups per step once the buffer is full (DOTS sigma)",
                                         Between(0.0, 1.0, low_open=True))
    knapsack_min_n: int = param(2, "knapsack: rollouts of prompts with success 0 or 1", AtLeast(2))
    knapsack_max_n: int = param(64, "knapsack: most rollouts of one prompt", AtLeast(2))
    hints: bool = param(False, "GHPO: regenerate all-fail groups with growing reference-solution prefixes", Boolean())
    hint_schedule: str = param("staged", "staged: GHPO's hint_fractions for all-fail groups; irt: SEELE's per-problem "
                               "hint rate fitted each round for accuracy selection.target; adhint: ADHint's rate "
                               "hint_max (1 - the unhinted round's accuracy); hindsight: HeRL's guidance, an all-fail "
                               "group's failed rollout and its unmet rubric items",
                               OneOf(("staged", "irt", "adhint", "hindsight")))
    hint_placement: str = param("prompt", "prompt: the hint stays in the trained prompt, only the policy's continuation "
                                "is trained (GHPO, SEELE); completion: a hinted rollout is trained as the unhinted "
                                "prompt's response, the hint's tokens off-policy (Guide; a loss taking "
                                "off_policy_mask)", OneOf(("prompt", "completion")))
    hint_fractions: tuple = param((0.25, 0.5, 0.75), "GHPO: the prefix fractions, in order",
                                  Satisfies(_increasing_fractions, "must be increasing fractions in (0, 1]"))
    hint_rounds: int = param(4, "SEELE, ADHint: rounds of G / hint_rounds rollouts per problem, the first without a "
                             "hint", AtLeast(2))
    hint_max: float = param(0.75, "ADHint: h_max of the hint rate h = h_max (1 - acc) (acc: the unhinted round's)",
                            Between(0.0, 1.0, low_open=True))
    hindsight_samples: int = param(4, "HeRL: responses sampled under each all-fail group's guidance (the best "
                                   "replaces the group's worst rollout)", AtLeast(1))
    hindsight_bonus: float = param(0.05, "HeRL: lambda of the bonus lambda (r_guided - r) on the guided failed rollout",
                                   Between(0.0, 1e3))
    irt_discrimination: float = param(10.0, "SEELE: k of a(h) = c + (1 - c) sigmoid(k (h - b)) (fixed; b is fitted)",
                                      Between(0.0, 1e3, low_open=True))
    irt_guess: float = param(0.0, "SEELE: c, the accuracy floor of a(h) (fixed)", Between(0.0, 1.0))
    curriculum_steps: int = param(0, "> 0 (arithmetic): operands and max_value grow to task's over these steps",
                                  AtLeast(0))
    curriculum_start_operands: int = param(2, "the curriculum's first operand count", AtLeast(2))
    curriculum_start_max_value: int = param(9, "the curriculum's first max_value", AtLeast(1))
    difficulty_initial: int = param(0, "adaptive_difficulty / scaler: the first upper level h / difficulty d (RLVE, "
                                    "SCALER: 0)", AtLeast(0))
    difficulty_max: int = param(4, "adaptive_difficulty / scaler: h / d stops here (level d: 2 + d operands / items / "
                                "numbers)", AtLeast(0))
    difficulty_window: int = param(4, "adaptive_difficulty: levels are drawn from {h - window + 1, ..., h} (RLVE: 4)",
                                   AtLeast(1))
    difficulty_min_prompts: int = param(8, "adaptive_difficulty: groups at level h before each check (RLVE: 8)",
                                        AtLeast(1))
    difficulty_threshold: float = param(0.9, "adaptive_difficulty: h rises when level h's accuracy >= this (RLVE: 0.9)",
                                        Between(0.0, 1.0))
    prof_rollouts: int = param(32, "prof: rollouts n' of each prompt, of which its num_generations are kept by the "
                               "process judge (task.flaw_judge)", AtLeast(2))
    prof_balance_only: bool = param(False, "prof ablation: the same balanced counts, each side's rows in sampled order "
                                    "(the process score ignored)", Boolean())
    std_filter_ratio: float = param(0.25, "std_filter: roll out num_prompts / ratio groups, train on the num_prompts "
                                    "of largest reward std (RAGEN rollout_filter_ratio: 0.25)",
                                    Between(0.0, 1.0, low_open=True))
    scaler_target: float = param(0.5, "scaler: the accuracy the difficulty d steers to (SCALER: 0.5)",
                                 Between(0.0, 1.0))
    scaler_gain: float = param(2.0, "scaler: k of d += clip(k (accuracy - target), +-step_cap) (SCALER: 2)",
                               Between(0.0, 1e3, low_open=True))
    scaler_step_cap: float = param(1.0, "scaler: the largest change of d per step (SCALER: 1)",
                                   Between(0.0, 1e3, low_open=True))
    exit_resume_fraction: float = param(0.5, "exit: fraction of the step's groups resumed from the buffer of "
                                        "partial histories (fewer while it holds fewer)", Between(0.0, 1.0))
    exit_capacity: int = param(256, "exit: partial histories kept (the lowest-priority one is replaced)", AtLeast(1))
    exit_max_chars: int = param(128, "exit: the longest partial history kept, in characters", AtLeast(1))
    exit_separator: str = param(";", "exit: the text that ends a solution step (histories are cut after one)",
                                Satisfies(lambda v: isinstance(v, str) and bool(v), "must be a non-empty string"))


@_section
class Tree:
    """Tree rollouts of single-turn runs (rl4llm.sampling.tree: TreeRL's EPTree, Hou et al. 2025): M paths per
    prompt, then L times each tree's N most uncertain tokens (largest -log p) become fork points with T branches
    each, decoded from the forked KV cache. A prompt's group is its M*(1 + L*N*T) paths = rl.num_generations.
    rl.advantage="treerl" gives each segment its tree advantage; any group estimator works over the leaves."""

    enabled: bool = param(False, "sample each group as a tree (needs rl.num_generations = M*(1 + L*N*T))", Boolean())
    initial_paths: int = param(6, "M: paths sampled from the prompt, each a tree's root path (TreeRL: 6)", AtLeast(1))
    branch_points: int = param(2, "N: fork points per tree per iteration (TreeRL: 2)", AtLeast(0))
    branches: int = param(2, "T: branches decoded from each fork point (TreeRL: 2)", AtLeast(1))
    iterations: int = param(1, "L: rounds of forking (TreeRL: 1)", AtLeast(0))
    criterion: str = param("surprise", "fork points: 'surprise' (largest -log p, TreeRL), 'entropy' (largest "
                           "token entropy, ETTRL), 'critical' (N drawn from the critical_top_k largest entropies, "
                           "CURE)", OneOf(sampling_tree.FORK_CRITERIA))
    critical_top_k: int = param(20, "criterion='critical': the candidates per tree (CURE: 20)", AtLeast(1))


@_section
class DeepSearch:
    """DeepSearch's MCTS in training (rl4llm.sampling.mcts; Wu et al. 2025, arXiv 2509.25454): per prompt, `expansions`
    rounds (the budget) each expand the best frontier node of the whole tree into `candidates` one-step children
    (KV cache forked); terminals are verified and backed up. A prompt's group is its expansions*candidates nodes =
    rl.num_generations, trained by rl.advantage="deepsearch" (Tree-GRPO)."""

    enabled: bool = param(False, "sample each group as a DeepSearch tree (needs rl.num_generations = "
                          "expansions*candidates and rl.advantage='deepsearch')", Boolean())
    candidates: int = param(4, "n: children per expansion", AtLeast(1))
    expansions: int = param(4, "expansions per prompt per step: the search's budget", AtLeast(1))
    step_tokens: int = param(8, "tokens per reasoning step (the tree's depth is ceil(max_new_tokens / step_tokens))",
                             AtLeast(1))
    gamma_min: float = param(0.1, "γ_min of the backup's depth decay γ(i, l) = max(i/l, γ_min) (paper: 0.1)",
                             Between(0.0, 1.0))
    quality: float = param(0.4, "λ1: frontier priority weight of tanh(Q_parent) (paper: 0.4)")
    uncertainty: float = param(0.0, "λ2: frontier priority weight of the node's entropy (paper: 0; 0.4 ablated)")
    depth: float = param(0.01, "λ3: frontier priority weight of sqrt(depth / max depth) (paper: 0.01)")
    replay_path: str = param("", "the replay buffer of cached correct solutions, a traces file (rl4llm.data."
                             "trace_file): a prompt in it is not searched, its group is direct rollouts with its "
                             "cached solutions in the first rows (rl4llm.train.search_replay); '' = none",
                             Satisfies(lambda v: not v or (os.path.isfile(v) and os.access(v, os.R_OK)),
                                       "not a readable file"))


@_section
class Pruning:
    """ARRoL online rollout pruning (Hsu et al. 2025, "Prune as You Generate"; rl4llm.rl.pruning): each prompt's
    oversample x G rollouts are decoded to checkpoint_tokens, a quality head on the policy's hidden state predicts
    each one's success, and the G kept are the ceil(target G) of highest and the rest of lowest prediction; only
    those are decoded to the end. The head is trained online on the kept rollouts' verifier outcomes."""

    enabled: bool = param(False, "prune each group's oversampled rollouts at the checkpoint", Boolean())
    oversample: int = param(2, "rollouts sampled per kept rollout (N / M)", AtLeast(2))
    checkpoint_tokens: int = param(8, "tokens decoded before pruning (< sampling.max_new_tokens)", AtLeast(1))
    target: float = param(0.5, "rho: the share of each group's kept rollouts picked as the likeliest to succeed",
                          Between(0.0, 1.0))
    learning_rate: float = param(1e-3, "the quality head's Adam learning rate", Between(0.0, 1.0, low_open=True))


@_section
class Arpo:
    """ARPO entropy-based adaptive rollout (Dong et al. 2025; sampling.multi_turn.BranchingConfig): M of the
    num_generations rollouts of a task start at the prompt, the rest branch after tool calls or start fresh."""

    initial_rollouts: int = param(0, "M; 0 = off; ARPO: 1 <= M < num_generations", AtLeast(0))
    entropy_weight: float = param(0.2, "alpha", Between(0.0, 1e6))
    branch_probability: float = param(0.5, "beta", Between(0.0, 1.0))
    beam_size: int = param(2, "at most beam_size - 1 copies of a rollout per tool call", AtLeast(2))
    entropy_tokens: int = param(20, "L: the step entropy reads the first L tokens of an action", AtLeast(1))
    entropy_top_k: int = param(10, "k: ... and the k largest log-probs of each", AtLeast(1))


@_section
class Epo:
    """EPO (Xu et al. 2025; train.companions.epo): L += -coef·(agg(H) - smooth_coef·w·agg(P)), P = alpha·[relu(
    kappa_low·H̄_k - H) + relu(H - kappa_high·H̄_k)] around turn k's historical mean entropy H̄_k, w the phase weight
    of the RL step over total_epochs. Its entropy bonus adds to rl.entropy_coef's."""

    coef: float = param(0.0, "lambda; 0 = off (EPO: 0.001)", Between(0.0, 1e6))
    smooth_coef: float = param(1.0, "c_s", Between(0.0, 1e6))
    kappa_low: float = param(0.0, "kappa_l (the paper's setting)", Between(0.0, 1e6))
    kappa_high: float = param(2.0, "kappa_r", Between(0.0, 1e6))
    alpha: float = param(0.05, "ScienceWorld; 0.1 ALFWorld", Between(0.0, 1e6))
    total_epochs: int = param(150, "E of the phase weight (official code: 150); the epoch is the RL step", AtLeast(1))


@_section
class Agent:
    """Multi-turn agents (train.agent): env '' = the single-turn job; an env name runs SFT on its expert episodes,
    then RL on it (configs/agent_*.py). Each env reads its own sub-section (`agent.guess_number.max_value`, ...)."""

    env: str = param("", "rl4llm.envs.ENVS name; '' = off")
    guess_number: dict = param(envs_lib.section_defaults("guess_number"), "env 'guess_number'")
    kg_search: dict = param(envs_lib.section_defaults("kg_search"), "env 'kg_search'")
    countdown_calc: dict = param(envs_lib.section_defaults("countdown_calc"), "env 'countdown_calc'")
    grid_nav: dict = param(envs_lib.section_defaults("grid_nav"), "env 'grid_nav'")
    max_action_tokens: int = param(24, "per-turn generation budget (an action stops at the env's closing tag)",
                                   AtLeast(1))
    max_obs_tokens: int = param(64, "longer observations keep head and tail", AtLeast(1))
    max_context: int = param(512, "KV-cache slots of a rollout (prompt + every turn)", AtLeast(1))
    obs_bucket: int = param(8, "observation lengths are multiples of this", AtLeast(1))
    record_bucket: int = param(32, "learner sequence lengths are multiples of this", AtLeast(1))
    turn_reward: str = param("valid_action:1", "'component:weight,...': turn reward of turn-level estimators")
    outcome_reward: str = param("correct:1", "'component:weight,...': the trajectory score (env.outcome() keys)")
    gated_rewards: bool = param(False, "G-RA: turn rewards count only where the outcome reaches reward_gate",
                                Boolean())
    reward_gate: float = param(1.0, "G-RA's delta", Between(-1e9, 1e9))
    expert_noise: float = param(0.0, "SFT: probability that a turn is the exploration policy's (no loss)",
                                Between(0.0, 1.0))
    sft_observation_weight: float = param(0.0, "SFT: loss weight of observation tokens (next-observation loss)",
                                          Between(0.0, 1e6))
    answer_template: str = param("<answer>{}</answer>", "IGPO: the teacher-forced ground-truth action",
                                 Satisfies(lambda v: v.count("{}") == 1, "must contain one '{}'"))
    eval_tasks: int = param(64, "held-out tasks of each evaluation (greedy)", AtLeast(1))
    arpo: Arpo = param(Arpo, "ARPO branching rollouts")
    over_turn_mask: bool = param(False, "Mini-o3: no loss on trajectories cut by the turn or context cap", Boolean())
    epo: Epo = param(Epo, "EPO entropy regularisation")


@_section
class Eval:
    """Held-out evaluation every `every` RL steps (train.evaluate): greedy accuracy and length; pass@k, avg@k, maj@k
    from `pass_n` samples at the rollout temperature. Any checkpoint, any k: python -m experiments.evaluate."""

    num_examples: int = param(512, "held-out prompts", AtLeast(1))
    every: int = param(25, "RL steps between evaluations", AtLeast(1))
    pass_n: int = param(4, "samples per prompt for pass@k", AtLeast(1))
    pass_k: tuple = param((1, 4), "the k of pass@k (each in [1, pass_n])")


@_section
class Checkpoint:
    """Orbax checkpoints of each stage (train.checkpointing)."""

    every: int = param(25, "steps between checkpoints", AtLeast(1))
    max_to_keep: int = param(3, "checkpoints kept", AtLeast(1))


@_section
class Mesh:
    """Device meshes (rl4llm.parallel): axes data x fsdp x tensor, product = the devices (one of them -1: the
    rest). data and fsdp split the batch, fsdp also every weight's width (ZeRO-3), tensor heads / MLP / vocabulary.
    On one device nothing is placed."""

    data: int = param(-1, "data-parallel axis")
    fsdp: int = param(1, "fully sharded data-parallel axis")
    tensor: int = param(1, "tensor-parallel axis")
    shard_params_over_data: bool = param(False, "weights sharded over fsdp x data (ZeRO-3 over every replica)",
                                         Boolean())
    sampler: str = param("shared", "the sampler's mesh: shared (the learner's), colocated (same devices, own "
                                   "layout) or disaggregated (the last sampler_devices devices)")
    sampler_data: int = param(-1, "sampler layout: data axis")
    sampler_fsdp: int = param(1, "sampler layout: fsdp axis")
    sampler_tensor: int = param(1, "sampler layout: tensor axis")
    sampler_devices: int = param(0, "disaggregated: devices of the sampler", AtLeast(0))
    judges: str = param("shared", "the judge models' mesh (outcome RM, PRM, generative verifier): shared (the "
                                  "learner's) or disaggregated (the last judge_devices of the learner's devices)",
                        OneOf(mesh_lib.JUDGE_PLACEMENTS))
    judge_data: int = param(-1, "disaggregated judges' layout: data axis")
    judge_fsdp: int = param(1, "disaggregated judges' layout: fsdp axis")
    judge_tensor: int = param(1, "disaggregated judges' layout: tensor axis")
    judge_devices: int = param(0, "disaggregated: devices of the judge models", AtLeast(0))


@_section
class Distributed:
    """Multi-host (rl4llm.parallel.distributed): initialize=True calls jax.distributed.initialize first. Leave the
    rest unset on Cloud TPU / SLURM / Open MPI (auto-detected); elsewhere set all three here or in the environment
    ($JAX_COORDINATOR_ADDRESS, $JAX_NUM_PROCESSES, $JAX_PROCESS_ID)."""

    initialize: bool = param(False, "call jax.distributed.initialize first", Boolean())
    coordinator_address: str = param("", "host:port of process 0")
    num_processes: int = param(0, "processes of the job (0: auto-detected)")
    process_id: int = param(-1, "this process's index (-1: auto-detected)")
    initialization_timeout_s: int = param(300, "seconds to wait for the other processes", AtLeast(1))


@_section
class RunConfig:
    """A whole run: SFT warm start then RL (`experiments/train.py`), parsed from its ml_collections form once."""

    seed: int = param(0, "the run's seed (params, data, sampling)")
    task: Task = param(Task, "the task and its rewards")
    model: Model = param(Model, "the decoder")
    sampling: Sampling = param(Sampling, "rollout sampling")
    sft: SFT = param(SFT, "the supervised warm start")
    rl: RL = param(RL, "the RL stage")
    critic: Critic = param(Critic, "PPO's value model")
    prime: Prime = param(Prime, "PRIME's implicit PRM")
    relift: Relift = param(Relift, "ReLIFT: SFT steps on the questions RL fails")
    teacher: Teacher = param(Teacher, "a teacher model sampling the off-policy traces (LUFFY from a stronger model)")
    reward_model: RewardModel = param(RewardModel, "an outcome reward model: its training and its use in RL")
    generative_verifier: GenerativeVerifier = param(GenerativeVerifier, "a generative verifier's P(Yes) as the reward")
    urpo: Urpo = param(Urpo, "URPO: the policy as player and referee in one GRPO loop")
    preference: Preference = param(Preference, "pairwise preference objectives (online DPO) in place of rl.loss")
    reward_weighting: RewardWeighting = param(RewardWeighting, "reward components' weights across steps "
                                              "(dynamic weighting, constrained RLHF)")
    selection: Selection = param(Selection, "prompt selection")
    tree: Tree = param(Tree, "tree rollouts (TreeRL's EPTree)")
    deepsearch: DeepSearch = param(DeepSearch, "DeepSearch's MCTS rollouts with a fixed budget")
    pruning: Pruning = param(Pruning, "ARRoL's online rollout pruning with a learned quality head")
    agent: Agent = param(Agent, "multi-turn agents")
    eval: Eval = param(Eval, "held-out evaluation")
    log_every: int = param(5, "RL steps between console / metrics lines", AtLeast(1))
    max_skipped_updates: int = param(5, "non-finite updates skipped in a row before the run stops (NonFiniteError)",
                                     AtLeast(1))
    checkpoint: Checkpoint = param(Checkpoint, "checkpoints")
    mesh: Mesh = param(Mesh, "device meshes")
    distributed: Distributed = param(Distributed, "multi-host")

    def replace(self, **changes) -> "RunConfig":
        """This config with `changes` ({section: {field: value}} or {field: value}), as a new RunConfig."""
        return _replace(self, changes)


def _replace(node, changes: dict[str, Any]):
    updates = {}
    for name, value in changes.items():
        current = getattr(node, name)
        updates[name] = _replace(current, value) if dataclasses.is_dataclass(current) and isinstance(value, dict) \
            else value
    return dataclasses.replace(node, **updates)
