"""Multi-hop question answering over a synthetic knowledge graph with a search tool (digest §3 T6; the k-hop
random-walk questions of DeepDive §4.24; MT-GRPO's search -> answer turns §4.1).

Each task draws its own small graph (so facts must be searched, never memorised): ``num_entities`` entities with
random two-syllable names (``kavo``), each with one fact per relation (``boss``, ``pal``, ``pet``...: another
entity of the graph). The question is a random walk ``v0 -r1-> v1 -r2-> ... -rk-> vk`` over distinct entities,
``k`` uniform in ``[min_hops, max_hops]``; the answer ``vk`` is uniquely determined by the path (relations are
functions). Transcript::

    Q kavo boss pet
    <search>kavo</search>=kavo: boss lumi, pal tize, pet sora
    <search>lumi</search>=lumi: boss kavo, pal sora, pet bine
    <answer>bine</answer>                     (ends the episode; exact match)

``<search>name</search>`` returns that entity's facts through the ``search`` tool (``rl4llm.envs.tools``, with
its timeout and retry); an unknown name is a tool error (``"=Error: not found"``: a valid action whose tool
failed). ``<answer>x</answer>`` ends the episode. The scripted expert searches the path's entities in order,
reading each next entity from the last result, and answers after ``k`` searches (``k + 1`` turns).

Turn reward components (``turn_reward_keys``):

* ``valid_action``: the action parsed;
* ``tool_success``: the search ran and found the entity (MT-GRPO's "tool executed");
* ``gold_in_result``: the gold answer is one of the result's names (MT-GRPO ``exist_answer_in_search_results``);
* ``progress``: the search retrieved the next path entity not retrieved before (``v_j``, ``j`` = path entities
  already retrieved), a dense hop-by-hop signal.

Outcome: ``correct`` (exact match of the answer), ``format_ok``. Privileged info: the answer name.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from rl4llm.envs import base
from rl4llm.envs import tools as tools_lib

_STREAMS = (0x4B65, 0x4B67, 0x4B6C)  # train, test, corpus
RELATIONS = ("boss", "pal", "pet", "city", "home", "team")  # none is a consonant-vowel-consonant-vowel name
_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
_NAME = re.compile(r"[a-z]+")
_MAX_WALK_TRIES = 50


@dataclasses.dataclass(frozen=True)
class KGSearchConfig:
    """Graphs of ``num_entities`` entities and ``num_relations`` relations (the first of :data:`RELATIONS`);
    questions of ``min_hops..max_hops`` hops; ``max_turns`` turns at most (the expert needs ``hops + 1``)."""

    num_entities: int = 8
    num_relations: int = 3
    min_hops: int = 1
    max_hops: int = 3
    max_turns: int = 5
    tool_timeout_s: float = 5.0
    tool_retries: int = 1
    test_fraction: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.num_relations <= len(RELATIONS):
            raise ValueError(f"KGSearchConfig.num_relations={self.num_relations}: must be in [1, {len(RELATIONS)}].")
        if not 1 <= self.min_hops <= self.max_hops:
            raise ValueError(
                f"KGSearchConfig: need 1 <= min_hops <= max_hops, got min_hops={self.min_hops}, "
                f"max_hops={self.max_hops}."
            )
        if self.num_entities < self.max_hops + 1 or self.num_entities > len(_CONSONANTS) ** 2 * len(_VOWELS) ** 2:
            raise ValueError(
                f"KGSearchConfig.num_entities={self.num_entities}: a {self.max_hops}-hop walk over distinct entities "
                f"needs at least max_hops + 1 = {self.max_hops + 1}, and names run out above "
                f"{len(_CONSONANTS) ** 2 * len(_VOWELS) ** 2}."
            )
        if self.max_turns < self.max_hops + 1:
            raise ValueError(
                f"KGSearchConfig.max_turns={self.max_turns}: a {self.max_hops}-hop question needs {self.max_hops} "
                f"searches and an answer; set max_turns >= {self.max_hops + 1}."
            )
        tools_lib.check_call_limits(self.tool_timeout_s, self.tool_retries, "KGSearchConfig.tool_*")
        if not 0.0 <= self.test_fraction < 1.0:
            raise ValueError(f"KGSearchConfig.test_fraction={self.test_fraction}: must be in [0, 1).")


def facts_text(name: str, facts: dict[str, str]) -> str:
    """An entity's search result: ``"kavo: boss lumi, pal tize"`` (relations in :data:`RELATIONS` order)."""
    return f"{name}: " + ", ".join(f"{rel} {facts[rel]}" for rel in RELATIONS if rel in facts)


def parse_facts(text: str) -> dict[str, str]:
    """The facts of a search-result observation (``facts_text``, with or without the observation marker)."""
    _, _, body = text.strip().lstrip("=").partition(": ")
    return dict(part.split(" ", 1) for part in body.split(", ") if " " in part)


class KGSearchEnv(base.AgentEnv):
    name = "kg_search"
    action_tags = ("search", "answer")
    turn_reward_keys = ("valid_action", "tool_success", "gold_in_result", "progress")

    def __init__(self, cfg: KGSearchConfig):
        super().__init__(cfg.max_turns)
        self.cfg = cfg
        self._tools = tools_lib.Tools({}, timeout_s=cfg.tool_timeout_s, retries=cfg.tool_retries)
        self._path: list[str] = []
        self._answer = ""
        self._retrieved = 0  # path entities v_0..v_{retrieved-1} have been searched, in order

    def _reset(self, task: base.TaskSpec, seed: int) -> None:
        graph = task.data["graph"]
        corpus = {name: facts_text(name, facts) for name, facts in graph.items()}
        self._tools = tools_lib.Tools(
            {"search": tools_lib.search(corpus)}, timeout_s=self.cfg.tool_timeout_s, retries=self.cfg.tool_retries
        )
        self._path, self._answer, self._retrieved = list(task.data["path"]), task.answer, 0

    def _act(self, action: base.Action) -> base.Turn:
        if action.tag == "answer":
            solved = action.arg == self._answer
            return base.Turn(base.observation("correct" if solved else "wrong"), done=True, solved=solved)
        result = self._tools.call("search", action.arg)
        progress = False
        if result.success and self._retrieved < len(self._path) - 1 and action.arg == self._path[self._retrieved]:
            self._retrieved += 1
            progress = True
        components = {
            "gold_in_result": float(result.success and self._answer in _NAME.findall(result.text)),
            "progress": float(progress),
        }
        return base.Turn(
            base.observation(result.text), tool_name="search", tool_success=result.success, components=components
        )


def _names(rng: np.random.Generator, n: int) -> list[str]:
    """``n`` distinct consonant-vowel-consonant-vowel names."""
    names: list[str] = []
    while len(names) < n:
        c, v = rng.integers(0, len(_CONSONANTS), size=2), rng.integers(0, len(_VOWELS), size=2)
        name = _CONSONANTS[c[0]] + _VOWELS[v[0]] + _CONSONANTS[c[1]] + _VOWELS[v[1]]
        if name not in names:
            names.append(name)
    return names


def _walk(rng: np.random.Generator, graph: dict[str, dict[str, str]], hops: int) -> tuple[list[str], list[str]] | None:
    """A random walk of ``hops`` relations over distinct entities (path, relations), or None if none was found."""
    names, relations = sorted(graph), sorted(next(iter(graph.values())))
    for _ in range(_MAX_WALK_TRIES):
        path, rels = [names[int(rng.integers(len(names)))]], []
        for _ in range(hops):
            rel = relations[int(rng.integers(len(relations)))]
            path.append(graph[path[-1]][rel])
            rels.append(rel)
        if len(set(path)) == len(path):
            return path, rels
    return None


def _draw_one(rng: np.random.Generator, cfg: KGSearchConfig) -> base.TaskSpec:
    hops = int(rng.integers(cfg.min_hops, cfg.max_hops, endpoint=True))
    while True:
        names = _names(rng, cfg.num_entities)
        graph = {}
        for name in names:
            others = [other for other in names if other != name]
            graph[name] = {rel: others[int(rng.integers(len(others)))] for rel in RELATIONS[: cfg.num_relations]}
        walk = _walk(rng, graph, hops)
        if walk is not None:
            break
    path, rels = walk
    prompt = f"Q {path[0]} {' '.join(rels)}\n"
    return base.TaskSpec(KGSearchEnv.name, prompt, path[-1], {"graph": graph, "path": path, "relations": rels})


def _draw(rng: np.random.Generator, cfg: KGSearchConfig, k: int) -> list[base.TaskSpec]:
    return [_draw_one(rng, cfg) for _ in range(k)]


def expert(cfg: KGSearchConfig) -> base.Policy:
    """Searches the question's entities hop by hop, reading the next one from the last result; then answers."""

    def policy(task: base.TaskSpec, turns: list[tuple[str, str]], rng: np.random.Generator) -> str:
        start, *rels = task.prompt.split()[1:]
        current, hop = start, 0
        for action, obs in turns:
            if hop < len(rels) and action == f"<search>{current}</search>" and not obs.startswith("=Error"):
                current, hop = parse_facts(obs)[rels[hop]], hop + 1
        return f"<answer>{current}</answer>" if hop == len(rels) else f"<search>{current}</search>"

    return policy


def explore(cfg: KGSearchConfig) -> base.Policy:
    """A random action over the names seen so far (question and results): search one, or (1 in 4) answer one."""

    def policy(task: base.TaskSpec, turns: list[tuple[str, str]], rng: np.random.Generator) -> str:
        seen = [w for text in [task.prompt, *(obs for _, obs in turns)] for w in _NAME.findall(text)]
        names = sorted({w for w in seen if w in task.data["graph"]})
        name = names[int(rng.integers(len(names)))]
        return f"<answer>{name}</answer>" if rng.random() < 0.25 else f"<search>{name}</search>"

    return policy


def alphabet(cfg: KGSearchConfig) -> str:
    """Every character of the env's texts."""
    return base.alphabet_of("Q :,\n", " ".join(RELATIONS), "Error: not found correct wrong search failed timed out")


def source(cfg: KGSearchConfig) -> base.TaskSource:
    """The env's task streams (``base.TaskSource``)."""
    return base.task_source(
        cfg, KGSearchEnv, _draw, expert, alphabet(cfg), streams=_STREAMS, hint="raise num_entities or max_hops"
    )
