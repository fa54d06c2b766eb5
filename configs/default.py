"""Default recipe: SFT warm start, then GRPO on built-in multi-step arithmetic, on CPU in minutes.

Run:
    python -m experiments.train --workdir=/tmp/rl4llm/default

Reaches (2-core CPU, idle, 433 s in all): held-out greedy accuracy 0.574 after the SFT warm start, 0.805 after
100 GRPO steps (+23.1 points); pass@1 0.457 -> 0.659, pass@4 0.748 -> 0.896 (README, "What the main job ...").

Override any field from the command line, e.g.
    python -m experiments.train --workdir=/tmp/rl4llm/g16 --config.rl.num_generations=16

Every other recipe in configs/ starts from this one and changes only what differs.
"""

import ml_collections

from rl4llm.data import tasks
from rl4llm.rewards import length as length_lib
from rl4llm.rl import registry
from rl4llm import config as config_lib
from rl4llm.config import agent as agent_config


def get_config() -> ml_collections.ConfigDict:
    """Returns the default config (every field of every recipe has its default here)."""
    c = ml_collections.ConfigDict()
    c.seed = 0

    # The built-in task (rl4llm.data.arithmetic): prompt "3+7-5+8=", answer "3+7=10;10-5=5;5+8=13;#13".
    c.task = ml_collections.ConfigDict()
    c.task.name = "arithmetic"
    c.task.min_operands = 4
    c.task.max_operands = 4
    c.task.max_value = 9
    c.task.operators = "+-"
    c.task.test_fraction = 0.1
    c.task.reward = "exact_answer"  # rl4llm.rewards.REWARDS
    # Other tasks (--config.task.name=countdown|sorting|modular|local, rl4llm.data.tasks) read their section.
    for name in tasks.SECTIONS:
        c.task[name] = ml_collections.ConfigDict(tasks.section_defaults(name))
    # Reward pipeline (rl4llm.rewards.pipeline): extra weighted components "name:weight,...", added always ("sum")
    # or only to correct answers ("if_correct"); length shaping by name; TTRL majority-vote pseudo-labels.
    c.task.extra_rewards = ""
    c.task.extra_rewards_mode = "sum"
    c.task.length_shaping = "none"  # rl4llm.rewards.length.LENGTH_SHAPING
    c.task.length_shaping_kwargs = config_lib.hyperparameter_fields(
        length_lib.LENGTH_SHAPING, length_lib.STANDARD_INPUTS
    )
    c.task.pseudo_labels = "none"  # "majority_vote": label-free rewards (TTRL)
    c.task.reward_workers = 0  # > 0: score in that many processes with a hard per-call timeout (0: inline)
    c.task.reward_timeout_s = 30.0

    # Decoder preset from rl4llm.models.PRESETS; vocab_size comes from the tokenizer.
    c.model = ml_collections.ConfigDict()
    c.model.preset = "arith"
    # A Hugging Face model directory (config.json, *.safetensors, tokenizer.json; Qwen2/2.5, Qwen3, Llama 3.x):
    # its weights, tokenizer and chat template replace the preset and the task tokenizer. "" = off.
    c.model.hf_checkpoint = ""
    c.model.export_hf = False  # True: write the final policy (LoRA merged) to <workdir>/hf_export for transformers / vLLM
    # Precision: dtype = activations/matmuls, param_dtype = stored params = the optimizer's master weights. Norms,
    # softmax, logits, log-probs and losses are float32 whatever these say. bf16 compute with fp32 master weights:
    # dtype="bfloat16", param_dtype="float32"; pure bf16 (half the param memory, no fp32 master): both "bfloat16".
    c.model.dtype = "float32"
    c.model.param_dtype = "float32"
    # What the learner's backward pass keeps of each decoder block (rl4llm.models.ModelConfig.remat): "none" keeps
    # every activation (fastest; right for the arith model, whose activations are tiny), "full" only block inputs
    # (one extra block forward; for long sequences / large models), "dots" the matmul outputs.
    c.model.remat = "none"
    # LoRA (rl4llm.models.lora): rank > 0 trains only low-rank adapters on `targets`; the base is frozen (no gradient,
    # no optimizer state) and, with KL on, is the reference policy (adapters off: no second copy).
    c.model.lora = ml_collections.ConfigDict()
    c.model.lora.rank = 0
    c.model.lora.alpha = 16.0
    c.model.lora.targets = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

    # Rollouts (rl4llm.sampling). Prompts are left-padded to a multiple of prompt_bucket.
    c.sampling = ml_collections.ConfigDict()
    c.sampling.temperature = 1.0
    c.sampling.top_k = 0
    c.sampling.top_p = 1.0
    c.sampling.max_new_tokens = 32
    c.sampling.prompt_bucket = 16

    # Supervised warm start on the task's reference solutions. 450 steps: the policy has learned the worked-answer
    # procedure but still slips on single facts (greedy ~0.57, sampled pass@1 ~0.46). At 300 steps it has not: it
    # writes answers of the right size with wrong intermediate sums (3 of 256 held-out solutions right at every step:
    # its 13% accuracy is mostly lucky guesses), and RL has little to reinforce (+6 points in 150 steps, measured).
    c.sft = ml_collections.ConfigDict()
    c.sft.steps = 450
    c.sft.batch_size = 64
    c.sft.learning_rate = 3e-3
    c.sft.warmup_steps = 20
    c.sft.lr_schedule = "constant"  # "constant" | "cosine" (to 0 at the last step), after the warm-up
    c.sft.weight_decay = 0.0
    c.sft.grad_clip = 1.0

    # RL (rl4llm.rl kernels by name; rl4llm.train.learner).
    c.rl = ml_collections.ConfigDict()
    c.rl.steps = 100
    c.rl.num_prompts = 16  # prompts per step
    c.rl.num_generations = 16  # completions per prompt (the group)
    # Methods by registry name. `*_kwargs` hold every hyper-parameter of every registered method as
    # None = "the method's default"; set ones are checked against the selected method's signature.
    c.rl.advantage = "grpo"
    c.rl.advantage_kwargs = config_lib.hyperparameter_fields(registry.ADVANTAGES, registry.ADVANTAGE_INPUTS)
    c.rl.loss = "ppo_clip"
    c.rl.loss_kwargs = config_lib.hyperparameter_fields(registry.POLICY_LOSSES, registry.LOSS_INPUTS)
    c.rl.agg_mode = "token-mean"
    # C of agg_mode="seq-mean-token-sum-norm" (Dr.GRPO: token sums / C, averaged over sequences), fixed for the run;
    # 0 = the run's response budget (sampling.max_new_tokens; agent runs: agent.max_context)
    c.rl.agg_norm_length = 0
    c.rl.kl_coef = 0.0  # > 0: KL to the frozen warm-start policy in the loss
    c.rl.kl_kind = "k3"
    c.rl.entropy_coef = 0.0
    c.rl.kl_in_reward = False  # True: the KL penalty goes into the token reward (verl use_kl_in_reward), not the loss
    c.rl.kl_target = 0.0  # > 0: adaptive KL coefficient (starting at kl_coef) toward this KL (Ziegler controller)
    c.rl.kl_horizon = 10000  # horizon of the adaptive KL controller, in sequences
    c.rl.ref_reset_every = 0  # > 0: every n RL steps, reference <- policy and optimizer state re-initialised (ProRL)
    c.rl.entropy_target = 0.0  # > 0: adaptive entropy_coef toward this mean token entropy (Skywork-OR1)
    c.rl.entropy_coef_delta = 0.005  # step of the adaptive entropy coefficient
    c.rl.token_selection = "all"  # "high_entropy": policy gradient only on the batch's top-rho entropy tokens (80/20)
    c.rl.token_selection_rho = 0.2
    c.rl.proxy_min_p = 0.02  # Lp-Reg: min-p of the proxy distribution (losses that need proxy_logp)
    c.rl.tis_cap = 0.0  # > 0: truncated importance sampling min(pi_learner/pi_sampler, cap) on the policy loss
    c.rl.tis_level = "token"  # "token" | "sequence"
    # True: the sampler generates the next batches in a background thread with params up to max_staleness RL steps
    # old (train.async_rollouts: decoupled PPO, the behaviour mismatch corrected by TIS, so tis_cap must be > 0)
    c.rl.async_rollouts = False
    c.rl.max_staleness = 1  # async: most RL steps between the params that generated a batch and those learning on it
    # Optimizer updates per rollout batch: ppo_epochs x num_minibatches. The main job takes ONE on-policy update (ratio 1
    # at every token: the PPO clip never binds and the gradient is REINFORCE's with GRPO advantages); the recipes take
    # their papers' schedules (e.g. configs/grpo.py and configs/dapo.py: 4), where old log-probs come from a behaviour pass.
    c.rl.ppo_epochs = 1
    c.rl.num_minibatches = 1
    c.rl.micro_batch_size = 0  # 0: the whole minibatch at once; else gradient accumulation
    c.rl.learning_rate = 1e-4
    c.rl.warmup_steps = 5
    c.rl.lr_schedule = "constant"  # "constant" | "cosine" (to 0 at the last update), after the warm-up
    c.rl.weight_decay = 0.0
    c.rl.grad_clip = 1.0
    c.rl.logprob_chunk_size = 64
    c.rl.logprob_vocab_chunk_size = 0  # > 0: vocabulary entries per logsumexp/entropy chunk (large vocabularies)

    # PPO's value model (rl4llm.models.value_head, rl4llm.train.companions.critic), trained when rl.advantage="gae".
    c.critic = ml_collections.ConfigDict()
    c.critic.shared_trunk = False  # True: a value head on the policy's decoder (one joint step); False: own decoder
    c.critic.checkpoint = ""  # Orbax critic params (value_head.save_critic); "" = initialise from the policy
    c.critic.learning_rate = 1e-4  # its own AdamW
    c.critic.lr_warmup_steps = 0
    c.critic.weight_decay = 0.0
    c.critic.grad_clip = 1.0
    c.critic.cliprange_value = 0.5  # verl critic.cliprange_value
    c.critic.value_loss_coef = 0.1  # shared trunk: weight of the value loss in the trunk's gradient (TRL vf_coef)
    c.critic.warmup_steps = 0  # the first RL steps update only the critic (the actor is unchanged)

    # PRIME's implicit PRM (rl4llm.rl.prime, rl4llm.train.companions.prime), trained when rl.advantage="prime".
    c.prime = ml_collections.ConfigDict()
    c.prime.beta = 0.05  # r_t = beta * (log pi_phi - log pi_ref) (PRIME)
    c.prime.learning_rate = 1e-4  # the PRM's own AdamW
    c.prime.weight_decay = 0.0
    c.prime.grad_clip = 1.0

    # Prompt selection and rollout allocation (rl4llm.data.selection / replay / allocation / curriculum).
    c.selection = ml_collections.ConfigDict()
    # uniform | dynamic_sampling (DAPO) | accuracy_band (PRIME) | dots | bots | knapsack
    c.selection.method = "uniform"
    c.selection.max_gen_rounds = 3  # dynamic_sampling / accuracy_band: generation rounds per step (DAPO max_num_gen_batches)
    c.selection.acc_low = 0.2  # accuracy_band: keep groups with acc_low <= mean correctness <= acc_high
    c.selection.acc_high = 0.8
    c.selection.pool_size = 1024  # dots / bots / knapsack: distinct training prompts with per-prompt statistics
    c.selection.target = 0.5  # dots / bots: target success rate
    c.selection.dots_temperature = 1e-3  # DOTS: softmax(-|p - target| / tau) sampling without replacement
    c.selection.bots_temperature = 0.0  # BOTS: 0 = top-k of the Thompson scores
    c.selection.bots_decay = 0.1  # BOTS lambda (forgetting toward the prior)
    c.selection.bots_implicit_weight = 0.1  # BOTS rho (weight of the implicit evidence)
    c.selection.bots_prior = 1.0  # BOTS alpha_0 = beta_0
    c.selection.replay_capacity = 0  # dots / bots: > 0 replays groups from a FIFO buffer of this many (DOTS: 512)
    c.selection.replay_fresh_fraction = 0.5  # fresh groups per step once the buffer can fill the rest (DOTS sigma)
    c.selection.knapsack_min_n = 2  # knapsack: rollouts of prompts with success 0 or 1
    c.selection.knapsack_max_n = 64  # knapsack: most rollouts of one prompt
    c.selection.hints = False  # GHPO: regenerate all-fail groups with growing reference-solution prefixes
    c.selection.hint_fractions = (0.25, 0.5, 0.75)
    c.selection.curriculum_steps = 0  # > 0 (arithmetic): operands and max_value grow to config.task's over these steps
    c.selection.curriculum_start_operands = 2
    c.selection.curriculum_start_max_value = 9

    # Multi-turn agents (rl4llm.train.agent): env "" = off; an env name runs SFT on its expert episodes
    # then RL on it (configs/agent_*.py). Fields and defaults: rl4llm.config.agent.agent_defaults.
    c.agent = agent_config.agent_defaults()

    # Held-out evaluation every `every` RL steps (rl4llm.train.evaluate): greedy accuracy and response length; pass@k,
    # avg@k, maj@k and answer entropy from `pass_n` samples at the rollout temperature. Any checkpoint, any k:
    # python -m experiments.evaluate --workdir=... --k=1,8,64
    c.eval = ml_collections.ConfigDict()
    c.eval.num_examples = 512
    c.eval.every = 25
    c.eval.pass_n = 4
    c.eval.pass_k = (1, 4)

    c.log_every = 5
    # A non-finite gradient skips its update (policy, critic, PRM: `train.optim.make_optimizer`); after this many
    # policy updates skipped in a row the run checkpoints its last good state and stops (`train.optim.NonFiniteError`).
    c.max_skipped_updates = 5
    c.checkpoint = ml_collections.ConfigDict()
    c.checkpoint.every = 25
    c.checkpoint.max_to_keep = 3

    # Device meshes (rl4llm.parallel): axes data x fsdp x tensor, product = the number of devices (one of them -1:
    # the rest). data and fsdp split the batch; fsdp also shards every weight's width (FSDP / ZeRO-3); tensor splits
    # heads, MLP and vocabulary. On one device nothing is placed (the programs run as without a mesh).
    c.mesh = ml_collections.ConfigDict()
    c.mesh.data = -1
    c.mesh.fsdp = 1
    c.mesh.tensor = 1
    c.mesh.shard_params_over_data = False  # True: weights sharded over fsdp x data (ZeRO-3 over every replica)
    # The sampler's mesh: "shared" (the learner's), "colocated" (same devices, layout sampler_*; weights resharded
    # after each update) or "disaggregated" (the last sampler_devices devices, layout sampler_*; the learner gets
    # the others; single process only).
    c.mesh.sampler = "shared"
    c.mesh.sampler_data = -1
    c.mesh.sampler_fsdp = 1
    c.mesh.sampler_tensor = 1
    c.mesh.sampler_devices = 0

    # Multi-host (rl4llm.parallel.distributed): initialize=True calls jax.distributed.initialize first. Leave the
    # rest unset on Cloud TPU / SLURM / Open MPI (auto-detected); elsewhere set all three here or in the environment
    # ($JAX_COORDINATOR_ADDRESS host:port of process 0, $JAX_NUM_PROCESSES, $JAX_PROCESS_ID).
    c.distributed = ml_collections.ConfigDict()
    c.distributed.initialize = False
    c.distributed.coordinator_address = ""
    c.distributed.num_processes = 0
    c.distributed.process_id = -1
    c.distributed.initialization_timeout_s = 300
    return c
