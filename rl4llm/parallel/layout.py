"""Where the RL stage's arrays live: the learner's state and batches on the learner mesh, the sampler's
weights and prompts on the sampler mesh (`mesh.Meshes`), by the logical-axis rules (`rules`).

`Layout.generate` runs the sampler on the sampler mesh: the prompts' rows split over its batch axes, the
weights resharded to the sampler's param shardings (`sampler_params`: the same arrays when the placement is
"shared"; for "colocated" / "disaggregated" a copy whose matrices are in the compute dtype (`sampler_weights`),
resharded once per update), and the rollout
returned replicated, so every process can read it on the host (scoring) without touching arrays other
processes hold (Tunix #698), on the learner's devices. One device->host transfer of the completions per step,
as before. `jit_step` compiles the learner's training steps on the learner mesh.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import jax
import numpy as np
from jax.sharding import NamedSharding

from rl4llm import sampling
from rl4llm.models import ModelConfig
from rl4llm.parallel import judges as judges_lib
from rl4llm.parallel import rules as rules_lib
from rl4llm.parallel.mesh import Meshes, meshes_from_config


def sampler_weights(params: Any, model_cfg: ModelConfig) -> Any:
    """The sampler's own copy of the weights: every matrix (ndim >= 2: kernels, the embedding, the lm head, LoRA
    factors, Qwen's [heads, head_dim] biases) in the compute dtype `model_cfg.dtype`, every vector (norm scales, 1-D
    biases) as it is.

    Exact: the decoder casts each of those leaves to the compute dtype where it reads it (`Linear`, the embedding
    lookup, `unembed`), and reads norm scales in float32, so the sampler draws the same tokens with the same
    log-probs. With float32 params and bfloat16 compute the copy is half the bytes, and decoding, which streams every
    weight once per token, reads half as much (vLLM and SGLang samplers of verl / OpenRLHF likewise hold bf16 weights
    while the learner keeps float32 masters)."""
    dtype = jax.numpy.dtype(model_cfg.dtype)
    return jax.tree.map(lambda x: x.astype(dtype) if np.ndim(x) >= 2 and x.dtype != dtype else x, params)


@dataclasses.dataclass(frozen=True, eq=False)
class Layout:
    """Placement of the RL stage's arrays (see the module docstring)."""

    meshes: Meshes
    model_cfg: ModelConfig
    rules: rules_lib.Rules = dataclasses.field(default_factory=lambda: dict(rules_lib.RULES))

    @property
    def judges(self) -> judges_lib.JudgePlacement:
        """Where the judge models score (`parallel.judges`): the judges' mesh, the policy's rules."""
        return judges_lib.JudgePlacement(self.meshes.judges, self.rules)

    @property
    def learner_batch(self) -> NamedSharding:
        return rules_lib.batch_sharding(self.meshes.learner, self.rules)

    @property
    def sampler_batch(self) -> NamedSharding:
        return rules_lib.batch_sharding(self.meshes.sampler, self.rules)

    def state_shardings(self, state: Any) -> Any:
        """NamedShardings of a learner state (TrainState, params, ...) on the learner mesh."""
        return rules_lib.tree_shardings(self.meshes.learner, state, self.model_cfg, self.rules)

    def shard_state(self, state: Any) -> Any:
        return rules_lib.place(state, self.state_shardings(state))

    def place_batch(self, batch: Any) -> Any:
        """A learner batch (or a Rollout) with its rows over the learner mesh's batch axes (scalars replicated)."""
        replicated = rules_lib.replicated(self.meshes.learner)
        return rules_lib.place(batch, jax.tree.map(lambda x: self.learner_batch if np.ndim(x) else replicated, batch))

    def jit_step(self, step: Callable, state: Any, batch_argnums: tuple[int, ...]) -> Callable:
        """`jax.jit` of a training step `step(state, *args) -> (state, metrics)` on the learner mesh: the state
        donated and kept in its shardings (`state_shardings(state)`, so the buffers are reused), the rows of the
        args at `batch_argnums` and of the decoder's activations constrained to the batch axes
        (`models.sharding.constrain_rows` under the mesh), the metrics replicated (readable by every process)."""
        mesh, rows = self.meshes.learner, self.learner_batch

        def sharded_step(*args):
            args = [rules_lib.constrain_batch(a, rows) if i in batch_argnums else a for i, a in enumerate(args)]
            with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
                return step(*args)

        out_shardings = (self.state_shardings(state), rules_lib.replicated(mesh))
        return jax.jit(sharded_step, donate_argnums=0, out_shardings=out_shardings)

    def sampler_params(self, params: Any) -> Any:
        """The learner's params for the sampler: the same arrays when the mesh is shared; else their copy with the
        matrices in the compute dtype (`sampler_weights`, cast where the learner's shards are, so half the bytes
        move when the params are float32 and the compute bfloat16), resharded to the sampler's layout."""
        if self.meshes.shared:
            return params
        weights = self._cast_program(params)
        return rules_lib.place(weights, rules_lib.tree_shardings(self.meshes.sampler, weights, self.model_cfg,
                                                                 self.rules))

    @functools.cached_property
    def _cast_program(self) -> Callable:
        return jax.jit(functools.partial(sampler_weights, model_cfg=self.model_cfg))

    @functools.cached_property
    def _generate_programs(self) -> dict:
        return {}

    def generate_program(self, sampling_cfg: sampling.SamplingConfig) -> Callable:
        """The jitted `sampling.generate` of `sampling_cfg` on the sampler mesh (compiled once per config and
        prompt_index None / array), taking `sampler_inputs(...)` and returning the Rollout replicated on the sampler
        mesh."""
        program = self._generate_programs.get(sampling_cfg)
        if program is None:
            mesh = self.meshes.sampler

            def generate(params, prompt_tokens, prompt_mask, key, prompt_index=None, row_offset=0, entropy_stats=None):
                with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):  # activations' row constraints
                    return sampling.generate(self.model_cfg, params, prompt_tokens, prompt_mask, key, sampling_cfg,
                                             prompt_index, row_offset=row_offset, entropy_stats=entropy_stats)

            program = jax.jit(generate, out_shardings=rules_lib.replicated(mesh))
            self._generate_programs[sampling_cfg] = program
        return program

    def sampler_inputs(self, params: Any, prompt_tokens, prompt_mask, key: jax.Array, prompt_index=None) -> tuple:
        """(params, prompt_tokens, prompt_mask, key, prompt_index) placed for the sampler: the learner's params
        resharded (`sampler_params`), the prompts' rows (and prompt_index's, if any) over the sampler's batch axes
        (replicated when they do not divide, e.g. ReMax's B greedy prompts), the key replicated."""
        prompts = rules_lib.place((prompt_tokens, prompt_mask), self.sampler_rows(prompt_tokens.shape[0]))
        key = rules_lib.place(key, rules_lib.replicated(self.meshes.sampler))
        if prompt_index is not None:
            prompt_index = rules_lib.place(prompt_index, self.sampler_rows(prompt_index.shape[0]))
        return (self.sampler_params(params), *prompts, key, prompt_index)

    def sampler_rows(self, num_rows: int) -> NamedSharding:
        """Rows split over the sampler's batch axes, or replicated when they do not divide."""
        rows = self.sampler_batch
        return rows if num_rows % rows.num_devices == 0 else rules_lib.replicated(self.meshes.sampler)

    def generate(self, params: Any, prompt_tokens, prompt_mask, key: jax.Array,
                 sampling_cfg: sampling.SamplingConfig, prompt_index=None, row_offset: int = 0,
                 entropy_stats=None) -> sampling.Rollout:
        """`sampling.generate` on the sampler mesh; `params` are the LEARNER's (resharded here), prompt_tokens /
        prompt_mask [B, P] host or device arrays, `key` a PRNG key, prompt_index None or [N], row_offset the first
        row's index in the whole rollout, entropy_stats HAPO's [4] or None (`sampling.generate`). The Rollout comes
        back replicated on the learner mesh (readable by every process; the learner's steps split its rows)."""
        inputs = self.sampler_inputs(params, prompt_tokens, prompt_mask, key, prompt_index)
        if entropy_stats is not None:
            entropy_stats = rules_lib.place(entropy_stats, rules_lib.replicated(self.meshes.sampler))
        rollout = self.generate_program(sampling_cfg)(*inputs, row_offset, entropy_stats)
        return rollout if self.meshes.shared else rules_lib.place(rollout, rules_lib.replicated(self.meshes.learner))


def layout_from_config(config, model_cfg: ModelConfig) -> Layout | None:
    """The Layout of `config.mesh` over all devices, or None on a single device (nothing to place: the
    programs run exactly as without a mesh)."""
    if jax.device_count() == 1:
        return None
    meshes = meshes_from_config(config.mesh)
    return Layout(meshes, model_cfg, rules_lib.logical_axis_rules(config.mesh.shard_params_over_data))
