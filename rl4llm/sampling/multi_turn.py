"""Batched multi-turn agent rollouts: generate a turn -> env.step -> append the observation -> repeat.

The loop (design: ../shared/papers/multi_turn_agents.md §2.2-2.3) runs B = groups x G environments at once:

1. `append_tokens` prefills the left-padded prompts into a static KV cache of `max_context` slots.
2. `generate_turn` (jitted `lax.while_loop`) samples up to `max_action_tokens` tokens per live row and feeds
   every sampled token straight back into the cache, stopping a row when it emits a stop token id or the token
   sequence of one of the env's action stop strings (checked on the row's last tokens inside the loop).
3. On the host, only the new action tokens are decoded and sent to `env.step`; only the observation text is
   encoded (never the history: no re-tokenisation drift), truncated in the middle to `max_obs_tokens`.
4. `append_tokens` prefills the observation segment at the current slots (incremental prefill; the cache is
   never rebuilt) and gives each row its next-token logits. Finished rows get no tokens (masked).

Slots are shared by the batch: a turn occupies `steps` slots (the longest action of the turn) and an
observation `bucket(longest observation)` slots; shorter rows leave holes whose key_mask is False. RoPE
positions count only each row's real tokens, so a row's computation is exactly that of its own compact
context. `collate` removes the holes: the record's tokens are each row's compact context, so the learner's
full forward pass on them reproduces the sampler's logits (tested). A batch that runs out of slots stops
and flags its unfinished rows `truncated`.

Stop strings are matched on token ids: a stop string ends the action when the model emits the tokenizer's
encoding of it (for character tokenizers that is the only way to write it; a BPE model could spell it with
other tokens, then the action runs to `max_action_tokens` and the env sees the text as it is).

ARPO branching (`BranchingConfig`, Dong et al. 2025, "Agentic Reinforced Policy Optimization"; digest §4.6):
each group starts M of its N rows; after a turn that called a tool, a row may be copied into a free row of its
group (token record, KV-cache row, `env.clone()`), and a group whose rows all ended starts its remaining free
rows from the prompt. Off (`branching=None`) the loop is the plain one above, bit for bit.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Protocol, Sequence

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from rl4llm.models import KVCache, ModelConfig, Params, fork_rows, forward, init_cache, unembed
from rl4llm.rl.multi_turn import arpo_branch_counts, arpo_step_entropy
from rl4llm.sampling.sampler import SamplingConfig, bucket_length, sample_tokens


class StepResult(Protocol):
    """What `env.step` returns (rl4llm.envs.base, §2.1): observation text, turn reward, done, info."""

    obs_text: str
    reward: float
    done: bool
    info: dict


class AgentEnv(Protocol):
    """The part of the environment protocol (§2.1) the rollout uses."""

    action_stop_strings: Sequence[str]

    def step(self, action_text: str) -> StepResult: ...

    def outcome(self) -> dict: ...

    def clone(self) -> "AgentEnv": ...  # a deep copy (ARPO branching only)


@dataclasses.dataclass(frozen=True)
class MultiTurnConfig:
    """Static shape and bookkeeping choices of a multi-turn rollout.

    max_turns: K, the turn cap; a trajectory not done after K turns is `over_turn`.
    max_context: S, KV-cache slots (prompt + all turns + observations, holes included).
    max_obs_tokens: an observation longer than this keeps its head and tail (truncated in the middle).
    obs_bucket: observation segments are padded to a multiple of this (few compiled shapes).
    record_bucket: the record's token length T is padded to a multiple of this.
    turn_components: C names of the per-turn reward components: "reward" (StepResult.reward), or a key of
      `info` / `info["reward_components"]` (e.g. "valid_action", "tool_success"); missing = 0.
    outcome_components: D keys of `env.outcome()`.
    """

    max_turns: int
    max_context: int
    max_obs_tokens: int = 64
    obs_bucket: int = 8
    record_bucket: int = 16
    turn_components: tuple[str, ...] = ("reward", "valid_action")
    outcome_components: tuple[str, ...] = ("correct",)

    def __post_init__(self):
        for name in ("max_turns", "max_context", "max_obs_tokens", "obs_bucket", "record_bucket"):
            if getattr(self, name) < 1:
                raise ValueError(f"MultiTurnConfig.{name} must be >= 1, got {getattr(self, name)}.")


@dataclasses.dataclass(frozen=True)
class BranchingConfig:
    """ARPO entropy-based adaptive rollout (Dong et al. 2025, "Agentic Reinforced Policy Optimization";
    dongguanting/ARPO `vllm_rollout_with_tools.py`, defaults of `scripts/ARPO_7B_Reasoning_1node.sh`).

    initial_rollouts: M, rows of each group that start at the prompt (< the group's N rows; the rest are free).
    entropy_weight: α; branch_probability: β; beam_size: at most beam_size − 1 copies of a row per tool call.
    entropy_tokens: L, entropy_top_k: k of the step entropy (`rl.multi_turn.arpo_step_entropy`).

    Per turn, the step entropy of each row's action is H = Σ_{t<L} Σ_{top-k} −p·log p / log|V| (the sampler's
    temperature-scaled log-probs, `sample_tokens`); H_init is the row's first H (a copy's first H after the
    branch). After a turn that called a tool (`info["tool_name"]` non-empty) and got its observation, each such
    row makes beam_size − 1 draws u ~ U(0, 1) and spawns a copy per draw with clip(u − α·(H − H_init), 0, 1) ≤ β
    (`arpo_branch_counts`), while its group has free rows. As in the official code, the H of that decision is
    the action that made the tool call (the tokens generated after the previous tool result; ΔH = 0 on the first
    turn), and the copy starts after the new tool result. The official code keeps H_init across training steps
    (a dict never reset); here it is per rollout.
    """

    initial_rollouts: int
    entropy_weight: float = 0.2
    branch_probability: float = 0.5
    beam_size: int = 2
    entropy_tokens: int = 20
    entropy_top_k: int = 10

    def __post_init__(self):
        for name in ("initial_rollouts", "entropy_tokens", "entropy_top_k"):
            if getattr(self, name) < 1:
                raise ValueError(f"BranchingConfig.{name} must be >= 1, got {getattr(self, name)}.")
        if self.beam_size < 2:
            raise ValueError(f"BranchingConfig.beam_size must be >= 2 (one copy per tool call), got {self.beam_size}.")
        if not 0.0 <= self.branch_probability <= 1.0:
            raise ValueError(f"BranchingConfig.branch_probability must be in [0, 1], got {self.branch_probability}.")
        if self.entropy_weight < 0:
            raise ValueError(f"BranchingConfig.entropy_weight must be >= 0, got {self.entropy_weight}.")


class Trajectories(flax.struct.PyTreeNode):
    """Multi-turn rollouts of B environments (§2.2), T context tokens, K turns, C turn / D outcome components.

    tokens:         [B, T] int32, each row's context: prompt, then (action_k, observation_k)*, right-padded.
    attention_mask: [B, T] bool, True on real tokens.
    loss_mask:      [B, T] bool, True only on policy-generated action tokens (stop string included).
    turn_id:        [B, T] int32, k on the action tokens of turn k; -1 on prompt / observation / padding.
    obs_turn_id:    [B, T] int32, k on the observation tokens that follow turn k; -1 elsewhere.
    behaviour_logp: [B, T] float32, the sampler's log-probs (sampler convention) on loss_mask, 0 elsewhere.
    turn_start:     [B, K] int32, index of the first action token of turn k (= the context length the policy
                    saw before acting); 0 where the turn does not exist.
    turn_end:       [B, K] int32, index of the last action token of turn k; 0 where the turn does not exist.
    turn_valid:     [B, K] bool, the turn exists.
    turn_reward:    [B, K, C] float32, components named by `turn_reward_names`.
    outcome:        [B, D] float32, `env.outcome()` components named by `outcome_names`.
    num_turns:      [B] int32.
    truncated:      [B] bool, stopped because the context slots ran out.
    over_turn:      [B] bool, not finished after `max_turns` turns (the rollout's cap, or the env's own: it ended
                    the episode with `info["truncated"]`, `envs.base`).
    group_ids:      [B] int32.
    parent_id:      [B] int32, ARPO: the row this one was copied from (-1: started at the prompt).
    branch_turn:    [B] int32, ARPO: turns k < branch_turn (and the observation after the last of them) are the
                    parent's, copied at the branch; 0 for rows started at the prompt.
    """

    tokens: jax.Array
    attention_mask: jax.Array
    loss_mask: jax.Array
    turn_id: jax.Array
    obs_turn_id: jax.Array
    behaviour_logp: jax.Array
    turn_start: jax.Array
    turn_end: jax.Array
    turn_valid: jax.Array
    turn_reward: jax.Array
    outcome: jax.Array
    num_turns: jax.Array
    truncated: jax.Array
    over_turn: jax.Array
    group_ids: jax.Array
    parent_id: jax.Array
    branch_turn: jax.Array
    turn_reward_names: tuple[str, ...] = flax.struct.field(pytree_node=False, default=())
    outcome_names: tuple[str, ...] = flax.struct.field(pytree_node=False, default=())


# ------------------------------------------------------------------------------------ device programs


@functools.partial(jax.jit, static_argnames=("model_cfg",), donate_argnames=("cache",))
def append_tokens(model_cfg: ModelConfig, params: Params, cache: KVCache, logits: jax.Array,
                  positions: jax.Array, tokens: jax.Array, mask: jax.Array, cursor: jax.Array
                  ) -> tuple[KVCache, jax.Array, jax.Array]:
    """Incremental prefill: writes a segment of L tokens per row to cache slots [cursor, cursor + L).

    tokens, mask: [B, L] (real tokens anywhere in the segment; holes are masked keys); logits: [B, V], each
    row's current next-token logits; positions: [B] int32, each row's count of real tokens so far (the RoPE
    position of its next token). Returns the cache, the next-token logits after each row's last real token
    (unchanged for rows with no token in the segment) and the advanced positions.
    """
    mask = mask.astype(bool)
    segment_positions = positions[:, None] + jnp.maximum(jnp.cumsum(mask, axis=-1) - 1, 0)  # [B, L]
    hidden, cache = forward(model_cfg, params, tokens, segment_positions, mask, cache=cache, cache_index=cursor)
    last = tokens.shape[1] - 1 - jnp.argmax(mask[:, ::-1], axis=-1)  # [B]
    last_hidden = jnp.take_along_axis(hidden, last[:, None, None], axis=1)[:, 0]  # [B, E]
    has_tokens = mask.any(-1)
    logits = jnp.where(has_tokens[:, None], unembed(model_cfg, params, last_hidden), logits)
    return cache, logits, positions + mask.sum(-1).astype(jnp.int32)


class TurnOutput(flax.struct.PyTreeNode):
    """One generated turn. tokens, logprobs, emitted: [B, A]; top_logprobs: [B, A, k] the k largest sampler
    log-probs at each step (k = `entropy_top_k`, 0 = not computed); stopped: [B] (a stop id / stop string ended
    the action); steps: [] int32, slots used (the longest action); cache, logits [B, V], positions [B]: updated."""

    tokens: jax.Array
    logprobs: jax.Array
    top_logprobs: jax.Array
    emitted: jax.Array
    stopped: jax.Array
    steps: jax.Array
    cache: KVCache
    logits: jax.Array
    positions: jax.Array


def stop_sequence_table(stop_sequences: tuple[tuple[int, ...], ...]) -> np.ndarray:
    """Stop token sequences right-aligned in an [M, L] int32 table, -1 to the left of each (L = longest)."""
    width = max(len(s) for s in stop_sequences)
    table = np.full((len(stop_sequences), width), -1, np.int32)
    for row, seq in enumerate(stop_sequences):
        table[row, width - len(seq):] = seq
    return table


def ends_with_stop_sequence(tokens: jax.Array, step: jax.Array, table: jax.Array) -> jax.Array:
    """Whether tokens[:, :step+1] ends with one of the sequences of `table` ([M, L], `stop_sequence_table`).

    tokens: [B, A]. Returns [B] bool. Positions before the turn's first token match nothing.
    """
    width = table.shape[1]
    index = step - width + 1 + jnp.arange(width)  # [L]
    window = jnp.where(index >= 0, tokens[:, jnp.maximum(index, 0)], -2)  # [B, L]
    matches = (table[None] == -1) | (window[:, None, :] == table[None])  # [B, M, L]
    return jnp.any(jnp.all(matches, axis=-1), axis=-1)


@functools.partial(jax.jit, static_argnames=("model_cfg", "sampling_cfg", "stop_sequences", "entropy_top_k"),
                   donate_argnames=("cache",))
def generate_turn(model_cfg: ModelConfig, params: Params, cache: KVCache, logits: jax.Array,
                  positions: jax.Array, live: jax.Array, cursor: jax.Array, key: jax.Array,
                  sampling_cfg: SamplingConfig, stop_sequences: tuple[tuple[int, ...], ...] = (),
                  entropy_top_k: int = 0) -> TurnOutput:
    """Samples one action (<= A = sampling_cfg.max_new_tokens tokens) for each live row.

    Token t is drawn from the row's next-token logits with key fold_in(key, t) (`sample_tokens`: temperature,
    top-k/p, sampler log-prob convention), then fed through the cache at slot cursor + t, so when the loop ends
    every emitted token is in the cache and `logits` predict the token after each row's action. A row stops
    after a token of `sampling_cfg.stop_token_ids` or the last token of a stop sequence; rows with live=False
    emit nothing. The loop ends when every row stopped or A tokens exist. With `entropy_top_k` = k > 0 it also
    records the k largest log-probs of each step (ARPO's step entropy), in `sample_tokens`' convention
    (log_softmax(logits / temperature), unfiltered).
    """
    cfg = sampling_cfg
    if cfg.temperature_tau > 0:
        raise ValueError("generate_turn: the adaptive temperature (temperature_tau > 0) is single-turn only.")
    n = logits.shape[0]
    a = cfg.max_new_tokens
    k = min(entropy_top_k, logits.shape[-1])
    tau = cfg.temperature if cfg.temperature > 0 else 1.0
    stop_ids = jnp.asarray(cfg.stop_token_ids, jnp.int32)
    table = jnp.asarray(stop_sequence_table(stop_sequences)) if stop_sequences else None

    def body(state: TurnOutput) -> TurnOutput:
        step = state.steps
        token, logprob = sample_tokens(state.logits, jax.random.fold_in(key, step), cfg)
        active = ~state.stopped & live
        token = jnp.where(active, token, cfg.pad_id)
        tokens = state.tokens.at[:, step].set(token)
        ends = jnp.isin(token, stop_ids)
        if table is not None:
            ends = ends | ends_with_stop_sequence(tokens, step, table)
        hidden, new_cache = forward(model_cfg, params, token[:, None], state.positions[:, None], active[:, None],
                                    cache=state.cache, cache_index=cursor + step)
        new_logits = unembed(model_cfg, params, hidden[:, 0])  # [B, V]
        top_logprobs = state.top_logprobs
        if k:
            top = jax.lax.top_k(jax.nn.log_softmax(state.logits.astype(jnp.float32) / tau, axis=-1), k)[0]  # [B, k]
            top_logprobs = top_logprobs.at[:, step].set(jnp.where(active[:, None], top, 0.0))
        return state.replace(
            tokens=tokens,
            logprobs=state.logprobs.at[:, step].set(jnp.where(active, logprob, 0.0)),
            top_logprobs=top_logprobs,
            emitted=state.emitted.at[:, step].set(active),
            stopped=state.stopped | (active & ends),
            steps=step + 1,
            cache=new_cache,
            logits=jnp.where(active[:, None], new_logits, state.logits),
            positions=state.positions + active.astype(jnp.int32))

    def keep_going(state: TurnOutput) -> jax.Array:
        return (state.steps < a) & jnp.any(live & ~state.stopped)

    init = TurnOutput(
        tokens=jnp.full((n, a), cfg.pad_id, jnp.int32), logprobs=jnp.zeros((n, a), jnp.float32),
        top_logprobs=jnp.zeros((n, a, k), jnp.float32), emitted=jnp.zeros((n, a), bool),
        stopped=jnp.zeros((n,), bool), steps=jnp.int32(0),
        cache=cache, logits=logits, positions=positions)
    return jax.lax.while_loop(keep_going, body, init)


# ------------------------------------------------------------------------------------------ host loop


def truncate_middle(ids: list[int], limit: int) -> list[int]:
    """At most `limit` ids: the first ceil(limit/2) and the last floor(limit/2) (VerlTool's 'middle')."""
    if len(ids) <= limit:
        return ids
    head = (limit + 1) // 2
    return ids[:head] + ids[len(ids) - (limit - head):]


def turn_components(result: StepResult, names: Sequence[str]) -> list[float]:
    """The C reward components of one step: "reward" is StepResult.reward; other names are read from
    info["reward_components"] then info (bools become 0/1); missing ones are 0."""
    info = result.info or {}
    nested = info.get("reward_components") or {}
    values = []
    for name in names:
        value = result.reward if name == "reward" else nested.get(name, info.get(name, 0.0))
        values.append(float(value))
    return values


@dataclasses.dataclass
class _Row:
    """Host bookkeeping of one trajectory: its compact context as parallel lists."""

    tokens: list[int]
    kinds: list[int]  # 0 prompt, 1 action, 2 observation
    turns: list[int]
    logps: list[float]
    turn_rewards: list[list[float]] = dataclasses.field(default_factory=list)
    done: bool = False
    truncated: bool = False
    over_turn: bool = False
    started: bool = True  # False: an ARPO free row (a later branch copy or fresh rollout), not generating yet
    parent: int = -1
    branch_turn: int = 0

    @property
    def live(self) -> bool:
        return self.started and not self.done

    def extend(self, ids, kind: int, turn: int, logps=None):
        self.tokens.extend(int(i) for i in ids)
        self.kinds.extend([kind] * len(ids))
        self.turns.extend([turn] * len(ids))
        self.logps.extend([0.0] * len(ids) if logps is None else [float(x) for x in logps])

    def branch(self, parent: int) -> "_Row":
        """A copy of this (live) row for a branch from row `parent`: the same record so far, its own lists."""
        return dataclasses.replace(self, tokens=list(self.tokens), kinds=list(self.kinds), turns=list(self.turns),
                                   logps=list(self.logps), turn_rewards=[list(r) for r in self.turn_rewards],
                                   parent=parent, branch_turn=len(self.turn_rewards))


def _pad_segments(segments: list[list[int]], pad_id: int, bucket: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded segments [B, bucket(longest)] and their mask (empty rows: all False)."""
    width = bucket_length(max(1, max(len(s) for s in segments)), bucket)
    tokens = np.full((len(segments), width), pad_id, np.int32)
    mask = np.zeros((len(segments), width), bool)
    for row, seg in enumerate(segments):
        tokens[row, :len(seg)] = seg
        mask[row, :len(seg)] = True
    return tokens, mask


# A branch: row b of (cache, logits [B, V], positions [B]) becomes row source[b]'s (source[b] = b keeps a row), so a
# copy continues exactly as its parent would (`models.fork_rows`, shared with the sampler's prompt prefill).
_fork_rows = jax.jit(fork_rows, donate_argnums=0)


_branch_counts = jax.jit(arpo_branch_counts, static_argnames=("entropy_weight", "branch_probability", "beam_size"))


@functools.partial(jax.jit, static_argnames=("num_tokens", "vocab_size"))
def _step_entropy(top_logprobs: jax.Array, emitted: jax.Array, num_tokens: int, vocab_size: int) -> jax.Array:
    """`arpo_step_entropy` of the first `num_tokens` tokens of each row's action: [B, A, k], [B, A] -> [B]."""
    return arpo_step_entropy(top_logprobs[:, :num_tokens], emitted[:, :num_tokens], vocab_size=vocab_size)


class _Branching:
    """Host state of an ARPO rollout (`BranchingConfig`): each row's initial step entropy, the group layout."""

    def __init__(self, cfg: BranchingConfig, rows: list[_Row], group_ids: Sequence[int], key: jax.Array):
        self.cfg, self.key = cfg, key
        _, self.groups = np.unique(np.asarray(group_ids), return_inverse=True)  # dense group index per row
        self.members = [np.flatnonzero(self.groups == g) for g in range(self.groups.max() + 1)]
        for g, members in enumerate(self.members):
            if len(members) <= cfg.initial_rollouts:
                raise ValueError(f"rollout: ARPO initial_rollouts={cfg.initial_rollouts} must be < the rows of "
                                 f"each group; group {g} has {len(members)}.")
            for i in members[cfg.initial_rollouts:]:
                rows[i].started = False
        self.initial_entropy = np.full(len(rows), np.nan, np.float32)
        self.entropy = np.zeros(len(rows), np.float32)

    def start_fills(self, rows: list[_Row]) -> None:
        """A group none of whose rows is live starts all its free rows from the prompt (their cache rows hold the
        prompt since the prefill). The official code starts one such rollout per round, which may branch; with
        slots shared by the batch that would take up to (N − M) more episodes, so here they start together."""
        for members in self.members:
            if not any(rows[i].live for i in members):
                for i in members:
                    rows[i].started = True

    def observe(self, out: TurnOutput, live: np.ndarray, vocab_size: int) -> None:
        """The step entropy of this turn's actions; a row's first one is its H_init."""
        self.entropy = np.asarray(_step_entropy(out.top_logprobs, out.emitted, self.cfg.entropy_tokens, vocab_size))
        first = live & np.isnan(self.initial_entropy)
        self.initial_entropy[first] = self.entropy[first]

    def branch(self, turn_round: int, rows: list[_Row], envs: list, tool_rows: np.ndarray) -> np.ndarray:
        """Spawns the copies of the rows that called a tool this round (`arpo_branch_counts`) into free rows of
        their groups, lowest index first: row record, `env.clone()`. Returns the cache-row source of each row."""
        remaining = np.array([sum(not rows[i].started for i in m) for m in self.members], np.int32)
        counts = np.asarray(_branch_counts(
            jax.random.fold_in(self.key, turn_round), jnp.asarray(self.entropy),
            jnp.asarray(np.where(np.isnan(self.initial_entropy), self.entropy, self.initial_entropy)),
            jnp.asarray(tool_rows), jnp.asarray(self.groups), jnp.asarray(remaining),
            entropy_weight=self.cfg.entropy_weight, branch_probability=self.cfg.branch_probability,
            beam_size=self.cfg.beam_size))
        source = np.arange(len(rows))
        for parent in np.flatnonzero(counts):
            free = [i for i in self.members[self.groups[parent]] if not rows[i].started]
            for i in free[:counts[parent]]:
                rows[i] = rows[parent].branch(parent)
                envs[i] = envs[parent].clone()
                self.initial_entropy[i] = np.nan  # set by the copy's first step after the branch (official)
                source[i] = parent
        return source


def rollout(model_cfg: ModelConfig, params: Params, tokenizer, envs: Sequence[AgentEnv],
            prompts: Sequence[str], group_ids: Sequence[int], key: jax.Array, sampling_cfg: SamplingConfig,
            cfg: MultiTurnConfig, prompt_bucket: int = 16, branching: BranchingConfig | None = None
            ) -> Trajectories:
    """Runs the B environments (already reset; `prompts[b]` is env b's initial observation text) to the end.

    Round r of the batch draws with key fold_in(key, r) (round r is turn r of every row without branching).
    Every env must have the same action stop strings. `sampling_cfg.max_new_tokens` is the per-turn action
    budget. Returns the collated `Trajectories`.

    With `branching` (ARPO, `BranchingConfig`): the first M rows of each group (by `group_ids`) start; after
    each round, rows that called a tool and got its observation spawn copies into their group's free rows
    (a copy: the parent's record and KV-cache row up to the branch point, `envs[i] = envs[parent].clone()`,
    then it samples on its own); once a group has no live row, its remaining free rows start fresh from the
    prompt. So every group ends with all its rows (unless the slots run out: unstarted rows end `truncated`
    with no turn). Fresh rows start late, so up to 2·max_turns rounds run: give `cfg.max_context` room.
    `envs` must be a list; afterwards envs[b] is the env that row b's record played.

    Advantages: ARPO's default "soft" attribution is what the learner does with this record unchanged: each row
    carries its own copy of the shared prefix, and plain GRPO over the N rows of a group gives every copy of a
    shared token its own row's advantage, so the token gets the sum of its d sharing rows' signals. "Hard"
    attribution (paper §3.3) would instead give each copy of a shared token the mean advantage of the d rows that
    share it (`parent_id`, `branch_turn` say which tokens those are). On-policy and unclipped the summed gradient on
    a shared token is the same (d copies, same ratio); they differ once PPO clipping sees each copy's own sign.
    """
    stop_strings = tuple(envs[0].action_stop_strings)
    if any(tuple(e.action_stop_strings) != stop_strings for e in envs):
        raise ValueError("rollout: every env of a batch must have the same action_stop_strings.")
    stop_sequences = tuple(tuple(tokenizer.encode(s)) for s in stop_strings)
    b = len(envs)
    rows = [_Row([], [], [], []) for _ in range(b)]
    arpo = None
    if branching is not None:
        key, branch_key = jax.random.split(key)
        arpo = _Branching(branching, rows, group_ids, branch_key)
    prompt_ids = [tokenizer.encode_prompt(p) for p in prompts]
    for row, ids in zip(rows, prompt_ids):
        row.extend(ids, 0, -1)
    tokens, mask = _pad_segments([ids[::-1] for ids in prompt_ids], sampling_cfg.pad_id, prompt_bucket)
    tokens, mask = tokens[:, ::-1], mask[:, ::-1]  # left-padded
    if tokens.shape[1] + sampling_cfg.max_new_tokens > cfg.max_context:
        raise ValueError(f"rollout: prompt ({tokens.shape[1]} slots) + one action ({sampling_cfg.max_new_tokens}) "
                         f"exceeds max_context={cfg.max_context}; raise agent.max_context.")
    cache = init_cache(model_cfg, b, cfg.max_context)
    logits = jnp.zeros((b, model_cfg.vocab_size), jnp.float32)
    cache, logits, positions = append_tokens(model_cfg, params, cache, logits, jnp.zeros((b,), jnp.int32),
                                             jnp.asarray(tokens), jnp.asarray(mask), jnp.int32(0))
    cursor = tokens.shape[1]
    for turn_round in range(cfg.max_turns if arpo is None else 2 * cfg.max_turns):
        if arpo is not None:
            arpo.start_fills(rows)
        live = np.array([r.live for r in rows])
        if not live.any():
            break
        if cursor + sampling_cfg.max_new_tokens > cfg.max_context:
            for r in rows:
                r.truncated = r.truncated or not r.done
            break
        out = generate_turn(model_cfg, params, cache, logits, positions, jnp.asarray(live), jnp.int32(cursor),
                            jax.random.fold_in(key, turn_round), sampling_cfg, stop_sequences,
                            0 if arpo is None else branching.entropy_top_k)
        cache, logits, positions = out.cache, out.logits, out.positions
        if arpo is not None:
            arpo.observe(out, live, model_cfg.vocab_size)
        act_tokens, act_logps, emitted, steps = jax.device_get((out.tokens, out.logprobs, out.emitted, out.steps))
        cursor += int(steps)
        observations = [[] for _ in range(b)]
        called_tool = np.zeros(b, bool)
        for i in np.flatnonzero(live):
            row = rows[i]
            turn = len(row.turn_rewards)
            ids = act_tokens[i][emitted[i]]
            row.extend(ids, 1, turn, act_logps[i][emitted[i]])
            result = envs[i].step(tokenizer.decode(ids.tolist()))
            row.turn_rewards.append(turn_components(result, cfg.turn_components))
            if result.done:  # an env that hit its own turn cap says so (envs.base: info["truncated"])
                row.done, row.over_turn = True, bool((result.info or {}).get("truncated"))
            elif turn + 1 == cfg.max_turns:
                row.done = row.over_turn = True
            else:
                observations[i] = truncate_middle(tokenizer.encode(result.obs_text), cfg.max_obs_tokens)
                called_tool[i] = bool((result.info or {}).get("tool_name"))
        if not any(observations):
            continue
        obs_tokens, obs_mask = _pad_segments(observations, sampling_cfg.pad_id, cfg.obs_bucket)
        if cursor + obs_tokens.shape[1] + sampling_cfg.max_new_tokens > cfg.max_context:
            for i, obs in enumerate(observations):
                if obs:
                    rows[i].truncated = rows[i].done = True
            for r in rows:  # ARPO rows that never started
                r.truncated = r.truncated or not r.started
            break
        for i, obs in enumerate(observations):
            if obs:
                rows[i].extend(obs, 2, len(rows[i].turn_rewards) - 1)
        cache, logits, positions = append_tokens(model_cfg, params, cache, logits, positions,
                                                 jnp.asarray(obs_tokens), jnp.asarray(obs_mask), jnp.int32(cursor))
        cursor += obs_tokens.shape[1]
        if arpo is not None:
            source = arpo.branch(turn_round, rows, envs, called_tool)
            if (source != np.arange(b)).any():
                cache, logits, positions = _fork_rows((cache, logits, positions), jnp.asarray(source, jnp.int32))
    outcomes = [[float(env.outcome().get(name, 0.0)) for name in cfg.outcome_components] for env in envs]
    return collate(rows, outcomes, group_ids, cfg, sampling_cfg.pad_id)


def collate(rows: Sequence[_Row], outcomes: Sequence[Sequence[float]], group_ids: Sequence[int],
            cfg: MultiTurnConfig, pad_id: int) -> Trajectories:
    """Host rows -> the `Trajectories` record (T = bucket(longest context), K = cfg.max_turns)."""
    b, k, c = len(rows), cfg.max_turns, len(cfg.turn_components)
    t = bucket_length(max(len(r.tokens) for r in rows), cfg.record_bucket)
    tokens = np.full((b, t), pad_id, np.int32)
    kinds = np.full((b, t), -1, np.int32)
    turns = np.full((b, t), -1, np.int32)
    logps = np.zeros((b, t), np.float32)
    turn_reward = np.zeros((b, k, c), np.float32)
    for i, r in enumerate(rows):
        n = len(r.tokens)
        tokens[i, :n], kinds[i, :n], turns[i, :n], logps[i, :n] = r.tokens, r.kinds, r.turns, r.logps
        if r.turn_rewards:
            turn_reward[i, :len(r.turn_rewards)] = r.turn_rewards
    loss_mask = kinds == 1
    turn_id = np.where(loss_mask, turns, -1)
    one_hot = turn_id[:, :, None] == np.arange(k)  # [B, T, K]
    turn_valid = one_hot.any(1)
    index = np.arange(t)[None, :, None]
    turn_start = np.where(turn_valid, np.where(one_hot, index, t).min(1), 0).astype(np.int32)
    turn_end = np.where(turn_valid, np.where(one_hot, index, -1).max(1), 0).astype(np.int32)
    return Trajectories(
        tokens=jnp.asarray(tokens), attention_mask=jnp.asarray(kinds >= 0), loss_mask=jnp.asarray(loss_mask),
        turn_id=jnp.asarray(turn_id, jnp.int32), obs_turn_id=jnp.asarray(np.where(kinds == 2, turns, -1), jnp.int32),
        behaviour_logp=jnp.asarray(logps), turn_start=jnp.asarray(turn_start), turn_end=jnp.asarray(turn_end),
        turn_valid=jnp.asarray(turn_valid), turn_reward=jnp.asarray(turn_reward),
        outcome=jnp.asarray(np.asarray(outcomes, np.float32).reshape(b, len(cfg.outcome_components))),
        num_turns=jnp.asarray(turn_valid.sum(1), jnp.int32),
        truncated=jnp.asarray([r.truncated for r in rows]), over_turn=jnp.asarray([r.over_turn for r in rows]),
        group_ids=jnp.asarray(group_ids, jnp.int32),
        parent_id=jnp.asarray([r.parent for r in rows], jnp.int32),
        branch_turn=jnp.asarray([r.branch_turn for r in rows], jnp.int32),
        turn_reward_names=tuple(cfg.turn_components), outcome_names=tuple(cfg.outcome_components))


def turn_segments(traj: Trajectories, row: int) -> list[tuple[str, int, list[int]]]:
    """Row `row`'s context as consecutive (kind, turn, token ids) segments, kind in {prompt, action, obs};
    concatenating the ids gives the row's real tokens (a check that the record has no re-tokenisation)."""
    tokens, real, turn_id, obs_id = jax.device_get((traj.tokens[row], traj.attention_mask[row], traj.turn_id[row],
                                                    traj.obs_turn_id[row]))
    segments: list[tuple[str, int, list[int]]] = []
    for tok, is_real, act, obs in zip(tokens, real, turn_id, obs_id):
        if not is_real:
            continue
        label = ("action", int(act)) if act >= 0 else ("obs", int(obs)) if obs >= 0 else ("prompt", -1)
        if not segments or segments[-1][:2] != label:
            segments.append((*label, []))
        segments[-1][2].append(int(tok))
    return segments

