"""The reward-model job (`experiments/train_reward_model.py`): an outcome RM (`rl4llm.reward_model`) trained on
preference pairs of the built-in arithmetic task, built procedurally, with a held-out pairwise accuracy (`run`).

A pair is a problem's prompt with its reference solution (chosen) and a corrupted one whose final answer is wrong
(rejected: `data.arithmetic.wrong_solution`, an off-by-d final answer or an off-by-d step carried on). Training
pairs come from the task's training stream (step s: `train_examples(s, batch_size)`), held-out pairs from its
held-out split (`test_examples(eval_pairs)`), so no held-out prompt is trained on. `config.reward_model.objective`
"bradley_terry" trains on the pairs; "bce" on their 2P sequences labelled 1 (chosen) / 0 (rejected), as a verifier
would label them. "judge" trains a generative verifier (`rl4llm.verifiers.generative`: the decoder alone, no head)
on the same pairs as verdicts: the judge text (`config.generative_verifier.template`) of the reference solution
labelled `yes_token`, of the wrong one `no_token`, by the cross-entropy of the judgement token
(`generative.judge_objective`; the soft-verifier paper, arXiv 2503.23829, distils a large judge's verdicts the same
way). The held-out metric is the same for these: the fraction of pairs with r_chosen > r_rejected (for "judge",
P(Yes | chosen) > P(Yes | rejected)). "process" trains a PRM (`rl4llm.process_reward_model`) with the per-step BCE on
the same 2P sequences (or the policy's samples, below), each step labelled by the task's exact step judge
(`rewards.arithmetic.step_labels`); its held-out metrics are the step accuracy and AUC over the held-out problems'
steps. "critique" fine-tunes a critique judge (`train.critique_job`: DeepSeek-GRM's principles, step verdicts and score)
on the procedural critiques of the "judge" objective's texts; held-out: its greedy critiques' verdict accuracy.

With `config.reward_model.sample_from` (an experiments.train workdir) the pairs are the policy's own completions
instead (`policy_pairs`): its last checkpoint samples G = `rl.num_generations` completions of each prompt at its
rollout settings, the task's verifier labels them, and each prompt gives min(accepted, rejected) (accepted,
rejected) pairs: `reward_model.sample_prompts` training prompts sampled once into a pool the updates draw from, and
the `eval_pairs` held-out prompts' pairs for the accuracy (fewer pairs than prompts: a prompt whose samples all agree
gives none). This is the RM of a real RLHF pipeline: it must tell the policy's right answers from its wrong ones.
For "process" every sampled completion is kept (`process_sequences.policy_step_sequences`: the pool holds
G·`sample_prompts` sequences, each update draws 2·`batch_size`), its steps labelled by the judge: the PRM learns the
steps the policy writes, right and wrong.

The RM's decoder is `config.model` (a preset with the task's tokenizer, or `model.hf_checkpoint`), without LoRA;
its trunk starts from the SFT policy of `config.reward_model.init_from` (an experiments.train workdir, whose
tokenizer it then uses), else from the HF checkpoint's weights, else at random
(`reward_model.init_params`). Writes `<workdir>/metrics.jsonl` (stage "rm"), `<workdir>/reward_model`
(`reward_model.save`, or `generative.save` for "judge", with the tokenizer's fingerprint) and
`<workdir>/summary.json` (the last and first held-out metrics as `rm_eval_*` and `rm_eval_*_init`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import time

import jax
import ml_collections
import numpy as np

from rl4llm import config as config_lib
from rl4llm import models
from rl4llm import process_reward_model as prm
from rl4llm import reward_model as rm
from rl4llm.data import arithmetic
from rl4llm.data import tasks as tasks_lib
from rl4llm.train import checkpointing
from rl4llm.train import critique_job
from rl4llm.train import evaluate as evaluate_lib
from rl4llm.train import metrics as metrics_lib
from rl4llm.train import optim
from rl4llm.train import process_sequences
from rl4llm.train import runs
from rl4llm.train import setup as setup_lib
from rl4llm.verifiers import generative
from rl4llm.verifiers import templates

STAGE = "rm"
_TRAIN_STREAM, _EVAL_STREAM = 0, 1  # rng streams of the corruptions (and of the sampled pairs' keys)


def preference_pairs(config, tokenizer, examples, rng: np.random.Generator) -> rm.PairBatch:
    """(prompt, reference solution, `wrong_solution` of `config.reward_model.corruption`) pairs of `examples`,
    encoded as the rollouts are (prompt bucket, `sampling.max_new_tokens` completion tokens), with the config's
    constant margin."""
    prompts = [e.prompt for e in examples]
    rejected = [arithmetic.wrong_solution(e.solution, rng, config.reward_model.corruption) for e in examples]
    return rm.encode_pairs(
        tokenizer, prompts, [e.solution for e in examples], rejected,
        prompt_bucket=config.sampling.prompt_bucket, completion_len=config.sampling.max_new_tokens,
        margin=[config.reward_model.margin] * len(prompts),
    )


def as_labelled(pairs: rm.PairBatch) -> rm.LabelBatch:
    """The 2P sequences of `pairs` labelled 1 (chosen) and 0 (rejected): the BCE objective's batch."""
    p = pairs.chosen_tokens.shape[0]
    return rm.LabelBatch(tokens=np.concatenate([pairs.chosen_tokens, pairs.rejected_tokens]),
                         attention_mask=np.concatenate([pairs.chosen_mask, pairs.rejected_mask]),
                         labels=np.concatenate([np.ones(p, np.float32), np.zeros(p, np.float32)]))


def policy_pairs(config, tokenizer, policy: runs.Policy, examples, key) -> tuple[rm.PairBatch, dict]:
    """Preference pairs of `policy`'s own completions of `examples`: G = `config.rl.num_generations` samples of each
    prompt at the policy's rollout settings (`evaluate.generate_scored`, `key`), labelled by its task's verifier
    (main reward 1 = accepted); a prompt with a accepted and r rejected samples gives min(a, r) pairs, its accepted
    and rejected samples zipped in sampled order. -> (pairs encoded as `preference_pairs`', metrics
    `pairs`, `pair_prompts_frac` (prompts that gave a pair), `accepted_frac`)."""
    g = config.rl.num_generations
    prompts, answers = [e.prompt for e in examples for _ in range(g)], [e.answer for e in examples for _ in range(g)]
    setup = policy.setup
    completions = evaluate_lib.generate_scored(setup.model_cfg, policy.params, setup.tokenizer, prompts, answers, key,
                                               setup.rollout_cfg, setup.eval_spec, setup.score_fn)
    accepted = (completions.rewards == 1.0).reshape(len(examples), g)
    texts = np.asarray(completions.texts, object).reshape(len(examples), g)
    pair_prompts, chosen, rejected = [], [], []
    for example, ok, row in zip(examples, accepted, texts):
        for c, r in zip(row[ok], row[~ok]):
            pair_prompts.append(example.prompt)
            chosen.append(c)
            rejected.append(r)
    if not chosen:
        raise ValueError(f"the policy of config.reward_model.sample_from={config.reward_model.sample_from!r} gave no "
                         f"pair on {len(examples)} prompts (accepted fraction {accepted.mean():.3f})")
    pairs = rm.encode_pairs(tokenizer, pair_prompts, chosen, rejected, prompt_bucket=config.sampling.prompt_bucket,
                            completion_len=config.sampling.max_new_tokens,
                            margin=[config.reward_model.margin] * len(chosen))
    metrics = {"pairs": float(len(chosen)), "pair_prompts_frac": float(np.mean(accepted.any(1) & ~accepted.all(1))),
               "accepted_frac": float(accepted.mean())}
    return pairs, metrics


def pool_batch(pool, batch_size: int, rng: np.random.Generator):
    """`batch_size` rows (pairs, or a PRM's sequences) of `pool` drawn uniformly without replacement (with, when the
    pool is smaller)."""
    size = jax.tree.leaves(pool)[0].shape[0]
    idx = rng.choice(size, batch_size, replace=size < batch_size)
    return jax.tree.map(lambda x: x[idx], pool)


def train_batch(config, task, tokenizer, step: int, pool: rm.PairBatch | None = None):
    """The batch of update `step` (a pure function of the seed and step): drawn from the `pool` of sampled pairs
    (`policy_pairs`; a PRM's sampled sequences, `process_sequences.policy_step_sequences`) when there is one, else
    the reference vs corrupted pairs of the step's training problems."""
    rng = np.random.default_rng((config.seed, _TRAIN_STREAM, step))
    objective = config.reward_model.objective
    if pool is not None:
        if objective == prm.OBJECTIVE:
            return pool_batch(pool, 2 * config.reward_model.batch_size, rng)
        pairs = pool_batch(pool, config.reward_model.batch_size, rng)
        return pairs if objective == "bradley_terry" else as_labelled(pairs)
    examples = task.source.train_examples(step, config.reward_model.batch_size)
    if objective in ("judge", critique_job.OBJECTIVE):
        return (judge_texts if objective == "judge" else critique_job.critique_batch)(config, tokenizer, examples, rng)
    if objective == prm.OBJECTIVE:
        return process_sequences.step_sequences(config, tokenizer, examples, rng)
    pairs = preference_pairs(config, tokenizer, examples, rng)
    return pairs if objective == "bradley_terry" else as_labelled(pairs)


def judge_texts(config, tokenizer, examples, rng: np.random.Generator) -> rm.LabelBatch:
    """The generative verifier's batch ("judge"): each example's judge text (`config.generative_verifier.template`:
    its prompt, reference answer and a completion) with its reference solution, labelled 1, then with a
    `wrong_solution`, labelled 0 (the same pairs as `preference_pairs`, as verdicts)."""
    v = config.generative_verifier
    rejected = [arithmetic.wrong_solution(e.solution, rng, config.reward_model.corruption) for e in examples]
    tokens, mask, _ = generative.encode_judge_texts(
        tokenizer, templates.template_pieces(v.template), [e.prompt for e in examples] * 2,
        [e.answer for e in examples] * 2, [e.solution for e in examples] + rejected, v.max_length)
    p = len(examples)
    return rm.LabelBatch(tokens=tokens, attention_mask=mask,
                         labels=np.concatenate([np.ones(p, np.float32), np.zeros(p, np.float32)]))


def evaluate_judge(model_cfg, params, batch: rm.LabelBatch, yes_id: int, no_id: int) -> dict:
    """Held-out `eval/pairwise_accuracy` (P(Yes | reference) > P(Yes | wrong solution), strict: `judge_texts`' first
    half against its second), `eval/loss` and `eval/verdict_accuracy` (`generative.judge_objective`'s: P(Yes) > P(No)
    on the right ones, < on the wrong) and `eval/margin` (mean P(Yes) gap)."""
    p_yes, _ = generative.make_judge_fn(model_cfg, yes_id, no_id, "full")(params, batch.tokens, batch.attention_mask)
    chosen, rejected = np.split(np.asarray(jax.device_get(p_yes)), 2)
    loss, metrics = jax.device_get(jax.jit(generative.judge_objective, static_argnums=(0, 1, 2))(
        model_cfg, yes_id, no_id, params, batch))
    return {"eval/pairwise_accuracy": float(np.mean(chosen > rejected)), "eval/loss": float(loss),
            "eval/verdict_accuracy": float(metrics["accuracy"]),
            "eval/margin": float(np.mean(chosen - rejected))}


def held_out_pairs(config, task, tokenizer) -> rm.PairBatch:
    rng = np.random.default_rng((config.seed, _EVAL_STREAM))
    return preference_pairs(config, tokenizer, task.source.test_examples(config.reward_model.eval_pairs), rng)


def evaluate(model_cfg, params, pairs: rm.PairBatch) -> dict:
    """Held-out `eval/pairwise_accuracy` (r_c > r_r, strict), `eval/loss` (Bradley–Terry) and `eval/margin`."""
    metrics = jax.device_get(rm.make_eval_fn(model_cfg, "bradley_terry")(params, pairs))
    return {"eval/pairwise_accuracy": float(metrics["accuracy"]), "eval/loss": float(metrics["loss"]),
            "eval/margin": float(metrics["margin"])}


def sft_policy(directory: str, model_cfg, key):
    """The last SFT params of an experiments.train workdir (`<directory>/checkpoints/sft`)."""
    ckpt = checkpointing.Checkpointer(os.path.join(directory, "checkpoints", "sft"))
    steps = ckpt.all_steps()
    if not steps:
        ckpt.close()
        raise config_lib.ConfigError(f"config.reward_model.init_from={directory!r}: no SFT checkpoint there")
    params, _ = ckpt.restore_entry(steps[-1], "params", jax.eval_shape(models.init_params, model_cfg, key))
    ckpt.close()
    return params


def initial_params(config, model_cfg, key):
    """The RM's params, a fresh head on: the SFT policy of `config.reward_model.init_from` (InstructGPT initialises
    the RM from the SFT model), else the HF checkpoint's decoder (`config.model.hf_checkpoint`), else a random one."""
    if config.reward_model.init_from:
        trunk = sft_policy(config.reward_model.init_from, model_cfg, key)
    elif config.model.hf_checkpoint:
        trunk = setup_lib.initial_params(config, model_cfg, key)
    else:
        trunk = None
    return rm.init_params(model_cfg, key, trunk)


def _check_task(config) -> None:
    if config.task.name != "arithmetic":
        raise config_lib.ConfigError(f"config.task.name={config.task.name!r}: the reward-model job builds its "
                                     "preference pairs from the 'arithmetic' task only")
    r = config.reward_model
    if r.sample_from and r.objective in ("judge", critique_job.OBJECTIVE):
        raise config_lib.ConfigError(f"config.reward_model.sample_from={r.sample_from!r}: sampled pairs train a scalar "
                                     "RM (objective 'bradley_terry', 'bce' or 'process'), not a generative judge")


def judge_token_ids(config, tokenizer) -> tuple[int, int]:
    """The ids of `config.generative_verifier.yes_token` / `no_token` in `tokenizer` (one token each), and its
    template readable; ConfigError naming the field otherwise."""
    v = config.generative_verifier
    try:
        templates.template_pieces(v.template)
        return (generative.single_token_id(tokenizer, v.yes_token, "yes_token"),
                generative.single_token_id(tokenizer, v.no_token, "no_token"))
    except ValueError as e:
        raise config_lib.ConfigError(f"config.reward_model.objective='judge': {e}") from e


def sampled_pairs(config, tokenizer):
    """(training pool, held-out pairs, metrics `pool/*` and `held_out/*` of `policy_pairs`) sampled by the policy of
    `config.reward_model.sample_from` (its last checkpoint) from `sample_prompts` training prompts and the
    `eval_pairs` held-out ones of its own task; for "process", a PRM's sequences
    (`process_sequences.policy_step_sequences`)."""
    r = config.reward_model
    sample = process_sequences.policy_step_sequences if r.objective == prm.OBJECTIVE else policy_pairs
    try:
        policy = runs.restore_policy(r.sample_from)
    except FileNotFoundError as e:
        raise config_lib.ConfigError(f"config.reward_model.sample_from={r.sample_from!r}: {e}") from e
    try:
        key = jax.random.key(config.seed)
        source = policy.setup.task.source  # the policy's own task (its held-out split stays held out)
        train, train_metrics = sample(config, tokenizer, policy, source.train_examples(0, r.sample_prompts),
                                      jax.random.fold_in(key, _TRAIN_STREAM))
        held_out, held_metrics = sample(config, tokenizer, policy, source.test_examples(r.eval_pairs),
                                        jax.random.fold_in(key, _EVAL_STREAM))
    finally:
        policy.close()
    return train, held_out, {**{f"pool/{k}": v for k, v in train_metrics.items()},
                             **{f"held_out/{k}": v for k, v in held_metrics.items()}}


def _objective(config, model_cfg, task, tokenizer, optimizer, key, held_out_pairs_=None):
    """(initial params, jitted update, held-out batch, `(params, batch) -> held-out metrics`) of
    `config.reward_model.objective`: the scalar RM (`rm.init_params`, `rm.make_train_step`, `evaluate`; held-out
    pairs `held_out_pairs_`, else the corrupted ones), the PRM ("process": the same params, `prm.make_train_step`,
    `prm.evaluate`; held-out sequences `held_out_pairs_`, else `process_sequences.step_sequences` of the held-out
    problems) or, for "judge", the bare decoder as a generative verifier (`generative.make_train_step`,
    `evaluate_judge`)."""
    r = config.reward_model
    params = initial_params(config, model_cfg, key)
    if r.objective == prm.OBJECTIVE:
        held_out = held_out_pairs_ if held_out_pairs_ is not None else process_sequences.step_sequences(
            config, tokenizer, task.source.test_examples(r.eval_pairs),
            np.random.default_rng((config.seed, _EVAL_STREAM)))
        return params, prm.make_train_step(model_cfg, optimizer), held_out, functools.partial(prm.evaluate, model_cfg)
    eval_rng = np.random.default_rng((config.seed, _EVAL_STREAM))
    if r.objective == critique_job.OBJECTIVE:
        return critique_job.objective(config, model_cfg, tokenizer, optimizer, params["trunk"],
                                      task.source.test_examples(r.eval_pairs), eval_rng)
    if r.objective != "judge":
        held_out = held_out_pairs_ if held_out_pairs_ is not None else held_out_pairs(config, task, tokenizer)
        return (params, rm.make_train_step(model_cfg, optimizer, r.objective), held_out,
                functools.partial(evaluate, model_cfg))
    yes_id, no_id = judge_token_ids(config, tokenizer)
    held_out = judge_texts(config, tokenizer, task.source.test_examples(r.eval_pairs), eval_rng)
    return (params["trunk"], generative.make_train_step(model_cfg, optimizer, yes_id, no_id), held_out,
            functools.partial(evaluate_judge, model_cfg, yes_id=yes_id, no_id=no_id))


def _train(config, model_cfg, task, tokenizer, writer, key):
    """The training loop -> (params, first and last held-out metrics)."""
    r = config.reward_model
    pool = held_out = None
    sample_metrics = {}
    if r.sample_from:
        pool, held_out, sample_metrics = sampled_pairs(config, tokenizer)
    optimizer = optim.make_optimizer(r.learning_rate, r.warmup_steps, r.weight_decay, r.grad_clip)
    params, step_fn, held_out, evaluate_fn = _objective(config, model_cfg, task, tokenizer, optimizer, key, held_out)
    state = rm.init_state(params, optimizer)
    first = {**evaluate_fn(state.params, held_out), **sample_metrics}
    writer.write(STAGE, 0, first)
    last = first
    for step in range(1, r.steps + 1):
        state, metrics = step_fn(state, train_batch(config, task, tokenizer, step, pool))
        if step % config.log_every == 0 or step % r.eval_every == 0 or step == r.steps:
            if step % r.eval_every == 0 or step == r.steps:
                last = evaluate_fn(state.params, held_out)
                metrics = {**metrics, **last}
            writer.write(STAGE, step, metrics)
    return state.params, first, last


def run(config: ml_collections.ConfigDict, workdir: str) -> dict:
    """Trains the RM of `config` (its editable form) in `workdir`; returns the summary also written to
    summary.json. Raises `rl4llm.config.ConfigError` before anything is built, and `checkpointing.StorageError` if the
    workdir cannot be written or already holds a reward model."""
    editable, config = config, config_lib.parse(config)
    _check_task(config)
    t0 = time.time()
    out = os.path.join(workdir, "reward_model")
    checkpointing.probe_workdir(workdir)
    if os.path.exists(out):
        raise checkpointing.StorageError(f"{out} exists: this job does not resume; choose a new --workdir")
    with open(os.path.join(workdir, "config.json"), "w", encoding="utf-8") as f:
        f.write(editable.to_json_best_effort(indent=2))
    task = tasks_lib.build(config.task, config.seed)
    tokenizer = setup_lib.model_tokenizer(config, config.reward_model.init_from or workdir, task)
    model_cfg = dataclasses.replace(setup_lib.model_config(config, tokenizer.vocab_size), lora_rank=0,
                                    lora_targets=())
    writer = metrics_lib.MetricsWriter(workdir)
    try:
        params, first, last = _train(config, model_cfg, task, tokenizer, writer, jax.random.key(config.seed))
    finally:
        writer.close()
    summary = {
        **{f"rm_{k.replace('/', '_')}": v for k, v in last.items() if k.startswith("eval/")},
        **{f"rm_{k.replace('/', '_')}_init": v for k, v in first.items() if k.startswith("eval/")},
        **{k: v for k, v in first.items() if k.startswith(("pool/", "held_out/"))},  # the sampled pairs' counts
        "rm_steps": config.reward_model.steps,
        "objective": config.reward_model.objective,
        "wall_seconds": time.time() - t0,
        "checkpoint": out,
    }
    meta = {"tokenizer_fingerprint": rm.tokenizer_fingerprint(tokenizer, task.source.corpus(0)[0]), **summary}
    judge = config.reward_model.objective in ("judge", critique_job.OBJECTIVE)
    (generative.save if judge else rm.save)(out, model_cfg, params, meta)
    with open(os.path.join(workdir, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2)
    metric = {prm.OBJECTIVE: "eval/step_auc", critique_job.OBJECTIVE: "eval/verdict_accuracy"}.get(
        config.reward_model.objective, "eval/pairwise_accuracy")
    print(f"held-out {metric.removeprefix('eval/')} {first[metric]:.3f} -> {last[metric]:.3f} "
          f"in {summary['wall_seconds']:.0f} s; reward model in {out}", flush=True)
    return summary
