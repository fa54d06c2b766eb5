"""Where the judge models of a run score: the outcome RM (`reward_model.Scorer`), the learned PRM
(`process_reward_model.Scorer`), the generative verifier's P(Yes) (`verifiers.generative.Verifier`) and its sampled
critiques (`verifiers.critique.CritiqueVerifier`), placed on the judges' mesh of `config.mesh.judges`
(`mesh.Meshes.judges`: the learner's mesh, or a disaggregated slice of the devices).

On that mesh a judge's params are sharded by the policy's logical-axis rules (`rules.tree_shardings` with the judge's
own ModelConfig: fsdp splits every weight's width, tensor the heads / MLP / vocabulary), and a scored batch's rows
are split over its batch axes (data x fsdp), and so are the decoder's activations (`models.sharding.constrain_rows`
under the judges' mesh: FSDP gathers the weights, the residual stream stays split by rows). A batch whose rows do not
divide the shards is padded with empty rows (mask 0) and the padding dropped on the host. Scoring is ONE jitted call
per batch and ONE transfer of the scores to the host (`score_rows`); without a placement (one device) the call is
the unplaced one.
Issue 22: "a reward-model role ... on its own mesh (or a slice of the policy's), batched scoring in the RL step
without a host round trip per sample".
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from rl4llm.models import ModelConfig
from rl4llm.parallel import rules as rules_lib


@dataclasses.dataclass(frozen=True, eq=False)
class JudgePlacement:
    """The judges' mesh and the logical-axis rules their params are sharded by (the policy's)."""

    mesh: Mesh
    rules: rules_lib.Rules = dataclasses.field(default_factory=lambda: dict(rules_lib.RULES))

    def place_params(self, params: Any, model_cfg: ModelConfig) -> Any:
        """A judge's `params` sharded on the judges' mesh by the rules and `model_cfg`'s logical axes."""
        return rules_lib.place(params, rules_lib.tree_shardings(self.mesh, params, model_cfg, self.rules))

    def replicate(self, x: Any) -> Any:
        """`x` (a PRNG key, a scalar) replicated on the judges' mesh."""
        return rules_lib.place(x, rules_lib.replicated(self.mesh))

    @property
    def row_shards(self) -> int:
        """How many ways a batch's rows are split: the product of the batch rule's mesh axes (data x fsdp)."""
        axes = rules_lib.batch_sharding(self.mesh, self.rules).spec[0]
        axes = () if axes is None else (axes,) if isinstance(axes, str) else axes
        return math.prod(self.mesh.shape[a] for a in axes)

    def place_rows(self, rows: tuple) -> tuple:
        """Host arrays [N, ...] padded with zero rows to a multiple of `row_shards`, rows over the batch axes."""
        n = np.shape(rows[0])[0]
        pad = -n % self.row_shards
        padded = tuple(np.concatenate([np.asarray(x), np.zeros((pad, *np.shape(x)[1:]), np.asarray(x).dtype)])
                       for x in rows)
        return rules_lib.place(padded, rules_lib.batch_sharding(self.mesh, self.rules))


def score_rows(placement: JudgePlacement | None, fn: Callable, params: Any, *rows) -> Any:
    """`fn(params, *rows)` (a jitted judge: rows [N, ...] -> a tree of [N, ...] scores) as host arrays: one call, one
    transfer. With a placement the rows are placed on the judges' mesh (`JudgePlacement.place_rows`), the scores
    replicated there (so every process of a multi-host mesh can read them, as the sampler's rollouts:
    `layout.Layout.generate`) and the padding dropped; `params` must already sit there (`place_params`)."""
    n = np.shape(rows[0])[0]
    if placement is None:
        out = fn(params, *(jnp.asarray(x) for x in rows))
    else:
        inputs = placement.place_rows(rows)
        with jax.sharding.use_abstract_mesh(placement.mesh.abstract_mesh):  # activations' row constraints
            out = placement.replicate(fn(params, *inputs))  # readable on the host by every process
    return jax.tree.map(lambda x: np.asarray(x)[:n], jax.device_get(out))
