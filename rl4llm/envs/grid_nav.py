"""Grid navigation (digest §3 T2; RAGEN FrozenLake): walk from ``S`` to ``G`` on a small map without stepping
into a hole ``#``.

Each task draws a ``size x size`` map with ``num_holes`` holes whose goal is reachable within the move budget
(``max_turns * max_moves`` moves). The prompt is the map, one row per line; an action is up to ``max_moves``
moves ``u d l r`` (up, down, left, right); the observation is the position after them, ``"=at <row> <col>"``
(moving off the map leaves the position unchanged). Transcript::

    S..#
    .#..
    ...G
    ....
    <move>dd</move>=at 2 0
    <move>rrr</move>                          (reaches G: the episode ends, observation "=goal")

Stepping on a hole ends the episode (``"=hole"``, not solved); moves after reaching ``G`` in the same action are
ignored. With ``slip > 0`` (FrozenLake's ``is_slippery``) each move goes, with probability ``slip``, to one of the
two perpendicular directions instead, drawn from ``reset``'s ``seed``. The scripted expert follows a shortest
path (BFS, avoiding holes) from the position of the last observation, ``max_moves`` moves per turn.

Turn reward components (``turn_reward_keys``):

* ``valid_action``: the action parsed (1 to ``max_moves`` of ``udlr``);
* ``progress``: the shortest-path distance to the goal went down this turn (1.0 on reaching it).

Outcome: ``correct`` (reached G), ``format_ok``. Privileged info: a shortest move sequence from the start.
"""

from __future__ import annotations

import collections
import dataclasses

import numpy as np

from rl4llm.envs import base

_STREAMS = (0x6D1D, 0x6D1E, 0x6D1F)  # train, test, corpus
MOVES = {"u": (-1, 0), "d": (1, 0), "l": (0, -1), "r": (0, 1)}
_PERPENDICULAR = {"u": "lr", "d": "lr", "l": "ud", "r": "ud"}
Cell = tuple[int, int]


@dataclasses.dataclass(frozen=True)
class GridNavConfig:
    """``size x size`` maps with ``num_holes`` holes; ``max_moves`` moves per action, ``max_turns`` actions;
    each move slips to a perpendicular direction with probability ``slip``."""

    size: int = 4
    num_holes: int = 3
    max_moves: int = 3
    max_turns: int = 4
    slip: float = 0.0
    test_fraction: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        if not 2 <= self.size <= 9:
            raise ValueError(f"GridNavConfig.size={self.size}: must be in [2, 9] (one digit per coordinate).")
        if not 0 <= self.num_holes <= self.size * self.size - 2:
            raise ValueError(
                f"GridNavConfig.num_holes={self.num_holes}: must be in [0, size*size - 2 = {self.size ** 2 - 2}]."
            )
        if not 1 <= self.max_moves <= 2 * self.size:
            raise ValueError(f"GridNavConfig.max_moves={self.max_moves}: must be in [1, 2*size = {2 * self.size}].")
        if not 0.0 <= self.slip < 1.0:
            raise ValueError(f"GridNavConfig.slip={self.slip}: must be in [0, 1).")
        if not 0.0 <= self.test_fraction < 1.0:
            raise ValueError(f"GridNavConfig.test_fraction={self.test_fraction}: must be in [0, 1).")


def _step(cell: Cell, move: str, size: int) -> Cell:
    """The cell one ``move`` from ``cell``; off the map -> ``cell``."""
    r, c = cell[0] + MOVES[move][0], cell[1] + MOVES[move][1]
    return (r, c) if 0 <= r < size and 0 <= c < size else cell


def shortest_path(rows: list[str], start: Cell) -> str | None:
    """A shortest move sequence from ``start`` to ``G`` avoiding holes (BFS, moves tried in ``udlr`` order), or
    None if ``G`` is unreachable."""
    size = len(rows)
    previous: dict[Cell, tuple[Cell, str] | None] = {start: None}
    queue = collections.deque([start])
    while queue:
        cell = queue.popleft()
        if rows[cell[0]][cell[1]] == "G":
            moves = []
            while previous[cell] is not None:
                cell, move = previous[cell]
                moves.append(move)
            return "".join(reversed(moves))
        for move in MOVES:
            nxt = _step(cell, move, size)
            if nxt not in previous and rows[nxt[0]][nxt[1]] != "#":
                previous[nxt] = (cell, move)
                queue.append(nxt)
    return None


def _find(rows: list[str], mark: str) -> Cell:
    return next((r, row.index(mark)) for r, row in enumerate(rows) if mark in row)


class GridNavEnv(base.AgentEnv):
    name = "grid_nav"
    action_tags = ("move",)
    turn_reward_keys = ("valid_action", "progress")

    def __init__(self, cfg: GridNavConfig):
        super().__init__(cfg.max_turns)
        self.cfg = cfg
        self._rows: list[str] = []
        self._pos: Cell = (0, 0)
        self._rng = np.random.default_rng(0)

    def _reset(self, task: base.TaskSpec, seed: int) -> None:
        self._rows = list(task.data["rows"])
        self._pos = _find(self._rows, "S")
        self._rng = np.random.default_rng([0x511F, seed])

    def _distance(self) -> int:
        """Shortest-path moves to G (always reachable: the walker never leaves S's hole-free component)."""
        return len(shortest_path(self._rows, self._pos))

    def _act(self, action: base.Action) -> base.Turn:
        moves = action.arg
        if len(moves) > self.cfg.max_moves or set(moves) - set(MOVES):
            return base.Turn(base.error_observation(f"use 1 to {self.cfg.max_moves} of udlr"), valid=False)
        before = self._distance()
        for move in moves:
            if self.cfg.slip and self._rng.random() < self.cfg.slip:
                move = _PERPENDICULAR[move][int(self._rng.integers(2))]
            self._pos = _step(self._pos, move, self.cfg.size)
            tile = self._rows[self._pos[0]][self._pos[1]]
            if tile == "G":
                return base.Turn(base.observation("goal"), done=True, solved=True, components={"progress": 1.0})
            if tile == "#":
                return base.Turn(base.observation("hole"), done=True)
        progress = float(self._distance() < before)
        return base.Turn(base.observation(f"at {self._pos[0]} {self._pos[1]}"), components={"progress": progress})


def _draw_one(rng: np.random.Generator, cfg: GridNavConfig) -> base.TaskSpec:
    n = cfg.size
    while True:
        cells = rng.permutation(n * n)[: cfg.num_holes + 2]
        grid = [["."] * n for _ in range(n)]
        for mark, cell in zip("SG" + "#" * cfg.num_holes, cells):
            grid[cell // n][cell % n] = mark
        rows = ["".join(row) for row in grid]
        path = shortest_path(rows, _find(rows, "S"))
        if path is not None and len(path) <= cfg.max_turns * cfg.max_moves:
            return base.TaskSpec(GridNavEnv.name, "".join(row + "\n" for row in rows), path, {"rows": rows})


def _draw(rng: np.random.Generator, cfg: GridNavConfig, k: int) -> list[base.TaskSpec]:
    return [_draw_one(rng, cfg) for _ in range(k)]


def _position(task: base.TaskSpec, turns: list[tuple[str, str]]) -> Cell:
    """The position the last ``at`` observation reports (the start before any)."""
    for _, obs in reversed(turns):
        if obs.startswith("=at "):
            row, col = obs.split()[1:]
            return int(row), int(col)
    return _find(task.data["rows"], "S")


def expert(cfg: GridNavConfig) -> base.Policy:
    """The first ``max_moves`` moves of a shortest path from the observed position."""

    def policy(task: base.TaskSpec, turns: list[tuple[str, str]], rng: np.random.Generator) -> str:
        path = shortest_path(task.data["rows"], _position(task, turns))
        return f"<move>{(path or 'u')[: cfg.max_moves]}</move>"

    return policy


def explore(cfg: GridNavConfig) -> base.Policy:
    """1 to ``max_moves`` uniformly random moves."""

    def policy(task: base.TaskSpec, turns: list[tuple[str, str]], rng: np.random.Generator) -> str:
        count = int(rng.integers(1, cfg.max_moves, endpoint=True))
        return "<move>" + "".join("udlr"[i] for i in rng.integers(0, 4, size=count)) + "</move>"

    return policy


def alphabet(cfg: GridNavConfig) -> str:
    """Every character of the env's texts."""
    return base.alphabet_of("SG#.\n 0123456789", "at goal hole Error: use 1 to of udlr")


def source(cfg: GridNavConfig) -> base.TaskSource:
    """The env's task streams (``base.TaskSource``)."""
    return base.task_source(
        cfg, GridNavEnv, _draw, expert, alphabet(cfg), streams=_STREAMS, hint="raise size or num_holes"
    )
