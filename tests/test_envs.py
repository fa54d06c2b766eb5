"""Multi-turn environments and tools (rl4llm.envs): the protocol, strict parsing, determinism, clone(), tool
timeouts and retries, scripted experts vs random policies, tokenizer coverage, and the adversarial programs of
tests/test_sandbox.py sent as python tool calls."""

import functools
import os
import socket
import subprocess
import threading

import numpy as np
import pytest

import adversarial_programs as adv
from rl4llm import envs
from rl4llm.envs import base
from rl4llm.envs import countdown_calc
from rl4llm.envs import grid_nav
from rl4llm.envs import guess_number
from rl4llm.envs import kg_search
from rl4llm.envs import tools
from rl4llm.rewards import sandbox
from rl4llm.tokenizers import sentencepiece_tokenizer

NAMES = sorted(envs.ENVS)
INFO_KEYS = {"valid_action", "tool_name", "tool_success", "reward_components", "truncated", "turn"}
GARBAGE = ["", "hello", "<guess>", "</answer>", "<bogus>x</bogus>", "<search>a</answer>", "<answer></answer>",
           "<search>a</search><search>b</search>", "x<move>u</move>", "<calc>" + "1+" * 300 + "1</calc>", "\x00\u2603"]


def _source(name: str, **knobs) -> base.TaskSource:
    return envs.source(name, knobs, seed=0)


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# ------------------------------------------------------------------------------------------------ protocol


@pytest.mark.parametrize("name", NAMES)
def test_protocol_conformance_on_expert_and_random_episodes(name):
    src, entry = _source(name), envs.ENVS[name]
    cfg = envs.build_config(name, {}, 0)
    env = src.env()
    assert isinstance(env, base.AgentEnv) and env.name == name
    assert env.action_stop_strings == tuple(f"</{tag}>" for tag in env.action_tags)
    assert env.turn_reward_keys[0] == "valid_action"
    for task in src.train_tasks(0, 10):
        for policy in (entry.expert(cfg), entry.explore(cfg)):
            obs, info = env.reset(task, seed=1)
            assert obs == task.prompt and obs.endswith("\n") and info == {"max_turns": env.max_turns}
            assert env.privileged_info() == task.answer
            turns, total = [], 0.0
            while not env.done:
                action = policy(task, turns, _rng(len(turns)))
                res = env.step(action)
                assert isinstance(res, base.StepResult) and set(res.info) == INFO_KEYS
                assert res.obs_text.startswith("=") and res.obs_text.endswith("\n")
                components = res.info["reward_components"]
                assert tuple(components) == env.turn_reward_keys and res.info["turn"] == len(turns)
                assert components["valid_action"] == float(res.info["valid_action"]) and res.reward in (0.0, 1.0)
                assert res.info["tool_name"] in ("", "search", "calc")
                assert res.info["tool_success"] == bool(components.get("tool_success", 0.0))
                turns.append((action, res.obs_text))
                total += res.reward
            assert set(env.outcome()) == set(env.outcome_keys) == {"correct", "format_ok"}
            assert env.outcome()["correct"] == total and len(turns) <= env.max_turns
            with pytest.raises(RuntimeError):
                env.step("<answer>x</answer>")


def test_step_before_reset_and_task_of_another_env_are_caller_errors():
    env = _source("guess_number").env()
    with pytest.raises(RuntimeError):
        env.step("<guess>1</guess>")
    with pytest.raises(ValueError, match="kg_search"):
        env.reset(_source("kg_search").train_tasks(0, 1)[0], 0)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<guess>32</guess>", base.Action("guess", "32")),
        ("  <guess> 32 </guess>\n", base.Action("guess", "32")),
        ("<answer>(3+7)*5</answer>", base.Action("answer", "(3+7)*5")),
        ("<guess>32</answer>", base.PARSE_ERROR),
        ("I think <guess>32</guess>", base.PARSE_ERROR),
        ("<guess>1</guess><guess>2</guess>", base.PARSE_ERROR),
        ("<GUESS>1</GUESS>", base.PARSE_ERROR),
        ("<guess>1<2</guess>", base.PARSE_ERROR),
        ("<guess>32", base.PARSE_ERROR),
        ("<search>kavo</search>", "unknown action search"),
        ("<guess> </guess>", "bad guess argument"),
        ("<guess>" + "1" * (base.MAX_ARG_CHARS + 1) + "</guess>", "bad guess argument"),
    ],
)
def test_parse_action_is_strict(text, expected):
    assert base.parse_action(text, ("guess", "answer")) == expected


@pytest.mark.parametrize("name", NAMES)
def test_garbage_actions_are_error_observations_not_exceptions(name):
    src = _source(name)
    env = src.env()
    task = src.train_tasks(0, 1)[0]
    env.reset(task, 0)
    for garbage in GARBAGE:
        if env.done:
            env.reset(task, 0)
        res = env.step(garbage)
        assert res.obs_text.startswith("=Error: ") and res.reward == 0.0
        assert res.info["valid_action"] is False and res.info["tool_success"] is False
        assert res.info["reward_components"]["valid_action"] == 0.0
        assert env.outcome() == {"correct": 0.0, "format_ok": 0.0}


@pytest.mark.parametrize("name", NAMES)
def test_invalid_turns_count_and_the_turn_cap_truncates(name):
    src = _source(name)
    env = src.env()
    env.reset(src.train_tasks(0, 1)[0], 0)
    results = [env.step("nonsense") for _ in range(env.max_turns)]
    assert [r.done for r in results] == [False] * (env.max_turns - 1) + [True]
    assert [r.info["truncated"] for r in results] == [False] * (env.max_turns - 1) + [True]
    assert env.done and env.outcome()["correct"] == 0.0


# ------------------------------------------------------------------------------- determinism and clone


@pytest.mark.parametrize("name", NAMES)
def test_tasks_are_deterministic_and_the_split_is_disjoint(name):
    a, b = _source(name), _source(name)
    assert a.train_tasks(3, 8) == b.train_tasks(3, 8)
    assert a.train_tasks(3, 4) == a.train_tasks(3, 8)[:4]  # a smaller batch is a prefix
    assert a.train_tasks(3, 8) != a.train_tasks(4, 8)
    train = {base.split_key(t) for step in range(4) for t in a.train_tasks(step, 64)}
    test = a.test_tasks(16)
    assert len({base.split_key(t) for t in test}) == 16
    assert not train & {base.split_key(t) for t in test}
    assert test == envs.source(name, {}, seed=7).test_tasks(16)  # the held-out set ignores the seed


@pytest.mark.parametrize("name", NAMES)
def test_same_task_seed_and_actions_give_the_same_episode(name):
    src, entry = _source(name), envs.ENVS[name]
    cfg = envs.build_config(name, {}, 0)
    policy = base.noisy(entry.expert(cfg), entry.explore(cfg), 0.5)
    for task in src.train_tasks(1, 5):
        first = base.play(src.env(), task, 3, policy, _rng(11))
        assert base.play(src.env(), task, 3, policy, _rng(11)) == first


def test_grid_slip_depends_on_the_episode_seed_only():
    cfg = grid_nav.GridNavConfig(size=6, num_holes=0, max_moves=6, max_turns=8, slip=0.5)
    rows = ["S.....", *["......"] * 4, ".....G"]
    task = base.TaskSpec("grid_nav", "".join(r + "\n" for r in rows), "", {"rows": rows})
    env = grid_nav.GridNavEnv(cfg)

    def run(seed):
        env.reset(task, seed)
        return [env.step("<move>ddd</move>").obs_text for _ in range(2)]  # 6 moves: cannot reach G

    assert run(5) == run(5)
    assert len({tuple(run(seed)) for seed in range(6)}) > 1


@pytest.mark.parametrize("name", NAMES)
def test_clone_is_independent(name):
    src, entry = _source(name), envs.ENVS[name]
    cfg = envs.build_config(name, {}, 0)
    task = next(t for t in src.train_tasks(0, 20) if len(base.play(src.env(), t, 0, entry.expert(cfg), _rng())) > 1)
    expert_turns = base.play(src.env(), task, 0, entry.expert(cfg), _rng())
    env = src.env()
    env.reset(task, 0)
    first = env.step(expert_turns[0][0])
    branch = env.clone()
    for _ in range(branch.max_turns):  # the branch wastes its turns
        if branch.done:
            break
        branch.step("garbage")
    assert branch.outcome()["format_ok"] == 0.0
    assert env.turn == 1 and not env.done and env.outcome() == {"correct": 0.0, "format_ok": 1.0}
    rest = [env.step(action).obs_text for action, _ in expert_turns[1:]]
    assert [first.obs_text, *rest] == [obs for _, obs in expert_turns]
    assert env.outcome() == {"correct": 1.0, "format_ok": 1.0}


# ------------------------------------------------------------------------------ experts and random policies


@pytest.mark.parametrize("name", NAMES)
def test_expert_solves_100_tasks_and_a_random_policy_mostly_fails(name):
    src, entry = _source(name), envs.ENVS[name]
    cfg = envs.build_config(name, {}, 0)
    env = src.env()
    tasks = src.train_tasks(0, 100)
    solved = {}
    for label, policy in (("expert", entry.expert(cfg)), ("random", entry.explore(cfg))):
        solved[label] = 0
        for i, task in enumerate(tasks):
            turns = base.play(env, task, i, policy, _rng(i))
            solved[label] += env.outcome()["correct"]
            if label == "expert":
                assert env.outcome() == {"correct": 1.0, "format_ok": 1.0} and len(turns) <= env.max_turns
    assert solved["expert"] == 100
    assert solved["random"] <= 40, solved  # measured at these seeds: guess 35, kg 5, countdown 9, grid 19 of 100


@pytest.mark.parametrize("name", NAMES)
def test_tokenizer_trained_on_the_corpus_covers_every_env_text(name, tmp_path):
    src, entry = _source(name), envs.ENVS[name]
    cfg = envs.build_config(name, {}, 0)
    lines = src.corpus(50)
    path = sentencepiece_tokenizer.train_tokenizer(lines, str(tmp_path / name))
    tokenizer = sentencepiece_tokenizer.Tokenizer.load(path)
    texts = [src.alphabet]
    env = src.env()
    for i, task in enumerate(src.test_tasks(10)):
        for policy in (base.noisy(entry.expert(cfg), entry.explore(cfg), 0.3), entry.explore(cfg)):
            turns = base.play(env, task, i, policy, _rng(i))
            texts.append(task.prompt + "".join(a + o for a, o in turns))
        env.reset(task, 0)
        texts += [env.step(g).obs_text for g in GARBAGE[:3]]
    for text in texts:
        assert tokenizer.unknown_chars(text) == set(), text
        assert tokenizer.decode(tokenizer.encode(text)) == text


def test_transcript_is_what_a_rollout_appends():
    task = base.TaskSpec("guess_number", "guess 0..7\n", "5", {"low": 0, "high": 7, "target": 5})
    turns = base.play(guess_number.GuessNumberEnv(guess_number.GuessNumberConfig()), task, 0,
                      guess_number.expert(guess_number.GuessNumberConfig()), _rng())
    assert turns == [("<guess>3</guess>", "=higher 4..7\n"), ("<guess>5</guess>", "=correct\n")]
    assert base.transcript(task, turns) == "guess 0..7\n<guess>3</guess>=higher 4..7\n<guess>5</guess>"


# ------------------------------------------------------------------------------------ per-env semantics


def test_guess_number_feedback_and_reward_components_by_hand():
    cfg = guess_number.GuessNumberConfig()
    env = guess_number.GuessNumberEnv(cfg)
    env.reset(base.TaskSpec("guess_number", "guess 0..7\n", "5", {"low": 0, "high": 7, "target": 5}), 0)
    r = env.step("<guess>3</guess>")  # 8 candidates -> {4..7}: gain 1 - 4/8
    assert r.obs_text == "=higher 4..7\n" and r.info["reward_components"] == {
        "valid_action": 1.0, "consistent": 1.0, "info_gain": 0.5}
    r = env.step("<guess>2</guess>")  # already excluded: no information
    assert r.obs_text == "=higher 4..7\n" and r.info["reward_components"]["consistent"] == 0.0
    assert r.info["reward_components"]["info_gain"] == 0.0
    r = env.step("<guess>6</guess>")  # {4..7} -> {4, 5}: 1 - 2/4
    assert r.obs_text == "=lower 4..5\n" and r.info["reward_components"]["info_gain"] == 0.5
    assert env.step("<guess>9</guess>").obs_text == "=Error: not a number in 0..7\n"
    assert env.step("<guess>٥</guess>").info["valid_action"] is False  # non-ASCII digits are not numbers
    r = env.step("<guess>5</guess>")
    assert (r.obs_text, r.reward, r.done) == ("=correct\n", 1.0, True)
    assert env.outcome() == {"correct": 1.0, "format_ok": 0.0}
    quiet = guess_number.GuessNumberEnv(guess_number.GuessNumberConfig(show_range=False))
    quiet.reset(base.TaskSpec("guess_number", "guess 0..7\n", "5", {"low": 0, "high": 7, "target": 5}), 0)
    assert quiet.step("<guess>3</guess>").obs_text == "=higher\n"


def test_guess_number_max_turns_must_allow_binary_search():
    assert guess_number.binary_search_turns(32) == 6  # ceil(log2(33))
    with pytest.raises(ValueError, match="max_turns"):
        guess_number.GuessNumberConfig(max_width=32, max_turns=5)


def test_kg_questions_are_random_walks_with_a_unique_answer():
    cfg = kg_search.KGSearchConfig(num_entities=6, max_hops=4, max_turns=6)
    for task in kg_search.source(cfg).train_tasks(0, 50):
        graph, path, rels = task.data["graph"], task.data["path"], task.data["relations"]
        assert task.prompt == f"Q {path[0]} {' '.join(rels)}\n" and len(set(path)) == len(path)
        node = path[0]
        for rel in rels:
            node = graph[node][rel]
        assert node == path[-1] == task.answer
        assert all(len(facts) == cfg.num_relations and name not in facts.values() for name, facts in graph.items())


def test_kg_search_turn_rewards():
    graph = {
        "kavo": {"boss": "lumi", "pal": "sora", "pet": "tize"},
        "lumi": {"boss": "kavo", "pal": "tize", "pet": "bine"},
        "sora": {"boss": "bine", "pal": "kavo", "pet": "lumi"},
        "bine": {"boss": "sora", "pal": "lumi", "pet": "kavo"},
        "tize": {"boss": "kavo", "pal": "bine", "pet": "sora"},
    }
    task = base.TaskSpec("kg_search", "Q kavo boss pet\n", "bine",
                         {"graph": graph, "path": ["kavo", "lumi", "bine"], "relations": ["boss", "pet"]})
    env = kg_search.KGSearchEnv(kg_search.KGSearchConfig(max_turns=6))
    env.reset(task, 0)

    def components(action):
        res = env.step(action)
        return res.obs_text, res.info["tool_name"], res.info["reward_components"]

    assert components("<search>sora</search>") == (  # off the path, but its result names the gold answer
        "=sora: boss bine, pal kavo, pet lumi\n", "search",
        {"valid_action": 1.0, "tool_success": 1.0, "gold_in_result": 1.0, "progress": 0.0})
    assert components("<search>kavo</search>")[2] == {
        "valid_action": 1.0, "tool_success": 1.0, "gold_in_result": 0.0, "progress": 1.0}
    assert components("<search>nobody</search>") == (
        "=Error: not found\n", "search", {"valid_action": 1.0, "tool_success": 0.0, "gold_in_result": 0.0,
                                           "progress": 0.0})
    assert components("<search>kavo</search>")[2]["progress"] == 0.0  # already retrieved
    assert components("<search>lumi</search>")[2] == {
        "valid_action": 1.0, "tool_success": 1.0, "gold_in_result": 1.0, "progress": 1.0}
    res = env.step("<answer>bine</answer>")
    assert (res.reward, res.done, env.outcome()) == (1.0, True, {"correct": 1.0, "format_ok": 1.0})
    assert kg_search.parse_facts("=lumi: boss kavo, pal tize, pet bine\n") == graph["lumi"]


def test_countdown_calc_steps_tool_and_verification():
    task = base.TaskSpec("countdown_calc", "3 7 5 -> 50\n", "(3+7)*5", {"numbers": [3, 7, 5], "target": 50})
    assert countdown_calc.reference_steps(task) == ["3+7", "10*5"]
    assert countdown_calc.reference_steps(base.TaskSpec("countdown_calc", "", "3*7-5", {})) == ["3*7", "21-5"]
    env = countdown_calc.CountdownCalcEnv(countdown_calc.CountdownCalcConfig())
    env.reset(task, 0)
    r = env.step("<calc>3+7</calc>")
    assert (r.obs_text, r.info["tool_name"], r.info["reward_components"]) == (
        "=10\n", "calc", {"valid_action": 1.0, "tool_success": 1.0, "hit_target": 0.0})
    r = env.step("<calc>10*5</calc>")
    assert r.info["reward_components"]["hit_target"] == 1.0 and not r.done
    r = env.step("<calc>2**9</calc>")
    assert (r.obs_text, r.info["valid_action"], r.info["tool_success"]) == ("=Error: bad expression\n", True, False)
    r = env.step("<answer>3*7+5</answer>")  # all numbers, wrong value
    assert (r.obs_text, r.reward, r.done) == ("=wrong\n", 0.0, True)
    env.reset(task, 0)
    assert env.step("<answer>5*(7+3)</answer>").reward == 1.0  # any correct equation, not only the reference


def test_grid_nav_holes_walls_and_progress():
    task = base.TaskSpec("grid_nav", "S.#\n...\n..G\n", "ddrr", {"rows": ["S.#", "...", "..G"]})
    cfg = grid_nav.GridNavConfig(size=3, num_holes=1, max_moves=3, max_turns=4)
    env = grid_nav.GridNavEnv(cfg)
    env.reset(task, 0)
    r = env.step("<move>ul</move>")  # off the map: stays
    assert (r.obs_text, r.info["reward_components"]) == ("=at 0 0\n", {"valid_action": 1.0, "progress": 0.0})
    r = env.step("<move>d</move>")
    assert (r.obs_text, r.info["reward_components"]["progress"]) == ("=at 1 0\n", 1.0)
    assert env.step("<move>uuuu</move>").obs_text == "=Error: use 1 to 3 of udlr\n"
    r = env.step("<move>drr</move>")
    assert (r.obs_text, r.reward, r.done) == ("=goal\n", 1.0, True)
    env.reset(task, 0)
    r = env.step("<move>rr</move>")
    assert (r.obs_text, r.reward, r.done, env.outcome()["correct"]) == ("=hole\n", 0.0, True, 0.0)
    assert grid_nav.shortest_path(["S#", "#G"], (0, 0)) is None


# ------------------------------------------------------------------------------------------------- tools


def test_calculator_is_exact_and_never_executes():
    assert tools.calculator("(3+7)*5") == "50" and tools.calculator("7/2") == "7/2"
    assert tools.calculator("-4*5") == "-20" and tools.calculator("(1/3)*3") == "1"
    for bad in ["1/0", "2**3", "__import__('os').system('true')", "x", "9" * 300, "(1"]:
        with pytest.raises(tools.ToolError):
            tools.calculator(bad)


def test_tool_timeout_retry_and_errors_are_text():
    calls = {"slow": 0, "flaky": 0, "bad_args": 0, "crash": 0}
    release = threading.Event()

    def slow(args):
        calls["slow"] += 1
        release.wait(5)
        return "late"

    def flaky(args):
        calls["flaky"] += 1
        if calls["flaky"] == 1:
            raise ConnectionError("transient")
        return "ok " + args

    def bad_args(args):
        calls["bad_args"] += 1
        raise tools.ToolError("bad args")

    def crash(args):
        calls["crash"] += 1
        raise RuntimeError("boom")

    registry = tools.Tools({"slow": slow, "flaky": flaky, "bad_args": bad_args, "crash": crash}, timeout_s=0.2)
    try:
        assert registry.call("slow", "x") == tools.ToolResult("Error: slow timed out", False)
        assert calls["slow"] == 2  # one retry (the default)
        assert registry.call("flaky", "x") == tools.ToolResult("ok x", True)
        assert registry.call("bad_args", "x") == tools.ToolResult("Error: bad args", False)
        assert calls["bad_args"] == 1  # a ToolError is not retried
        assert registry.call("crash", "x") == tools.ToolResult("Error: crash failed", False)
        assert tools.Tools({"crash": crash}, retries=3).call("crash", "") == tools.ToolResult("Error: crash failed",
                                                                                               False)
        assert calls["crash"] == 2 + 4
        assert registry.call("nope", "x") == tools.ToolResult("Error: unknown tool nope", False)
        long = tools.Tools({"echo": lambda a: a * 1000}).call("echo", "ab")
        assert len(long.text) == tools.MAX_OUTPUT_CHARS and long.text.endswith(tools.TRUNCATED)
    finally:
        release.set()
    with pytest.raises(ValueError, match="timeout_s"):
        tools.Tools({}, timeout_s=0)
    with pytest.raises(ValueError, match=r"KGSearchConfig.tool_\*: timeout_s=5.0 must be > 0 and retries=-1"):
        envs.build_config("kg_search", {"tool_retries": -1}, 0)


def test_a_tool_timeout_in_an_env_is_an_error_observation(monkeypatch):
    release = threading.Event()

    def hanging_search(corpus):
        return lambda query: release.wait(5) and "never"

    monkeypatch.setattr(kg_search.tools_lib, "search", hanging_search)
    src = kg_search.source(kg_search.KGSearchConfig(tool_timeout_s=0.1, tool_retries=0))
    env = src.env()
    task = src.train_tasks(0, 1)[0]
    env.reset(task, 0)
    try:
        res = env.step(f"<search>{task.data['path'][0]}</search>")
    finally:
        release.set()
    assert res.obs_text == "=Error: search timed out\n" and not res.done
    assert (res.info["valid_action"], res.info["tool_success"]) == (True, False)


def test_python_tool_runs_in_the_sandbox():
    registry = tools.Tools(tools.BUILTIN, timeout_s=tools.PYTHON_LIMITS.wall_s + 5)
    assert registry.call("python", "print(sum(range(10)))") == tools.ToolResult("45\n", True)
    assert registry.call("python", "1/0") == tools.ToolResult("Error: python program failed", False)
    assert registry.call("python", "def f(:") == tools.ToolResult("Error: python could not run the program", False)


# Short limits keep the adversarial calls fast; the registry waits past the sandbox's own wall clock.
_FAST = sandbox.Limits(wall_s=1.5, cpu_s=1, nproc=8, memory_mb=256, max_output_bytes=1 << 14)


def _python_tool() -> tools.Tools:
    return tools.Tools({"python": functools.partial(tools.python, limits=_FAST)}, timeout_s=_FAST.wall_s + 5)


def test_adversarial_programs_as_python_tool_calls_leave_the_run_alive(tmp_path):
    """tests/test_sandbox.py's attacks, sent through the tool registry: each call returns an observation (an
    error, or for the setsid escape its in-time ``ok``), nothing outlives it, and this process is unharmed."""
    registry = _python_tool()
    escaped = [str(tmp_path / "escaped"), os.path.expanduser("~/ESCAPED_BY_TOOL")]
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.setblocking(False)
    programs = [adv.INFINITE_LOOP, *adv.MEMORY_BOMBS, *adv.HUGE_OUTPUTS, adv.FORGED_RESULTS,
                adv.write_files(escaped)]
    if sandbox.isolation() == "namespaces":  # the documented fallback does not isolate the network
        programs.append(adv.connect(server.getsockname()[1]))
    if adv.CONTAINED:  # as in test_sandbox: only where the program cannot reach this process
        programs += [adv.FORK_BOMB, adv.SETSID_ESCAPE]
    try:
        for program in programs:
            result = registry.call("python", program)
            assert isinstance(result, tools.ToolResult) and len(result.text) <= tools.MAX_OUTPUT_CHARS
            assert result.success == (program == adv.SETSID_ESCAPE), (program, result)
            if os.getuid() == 0:
                assert adv.uid_processes(sandbox._sandbox_uid()) == [], program
        for path in escaped:
            assert not os.path.exists(path), path
        with pytest.raises(BlockingIOError):
            server.accept()
    finally:
        server.close()
        if os.path.exists(escaped[1]):
            os.remove(escaped[1])


@pytest.mark.skipif(not adv.CONTAINED, reason="this attack would reach this user's own processes")
def test_killing_the_parent_through_the_python_tool():
    bystander = subprocess.Popen(["sleep", "30"])
    try:
        result = _python_tool().call("python", adv.kill_processes([os.getpid(), os.getppid(), bystander.pid, 1]))
        assert result.success is False  # it killed itself, and nothing outside the sandbox
        assert bystander.poll() is None, "the sandbox killed a host process"
    finally:
        bystander.kill()
        bystander.wait()


# ---------------------------------------------------------------------------------------------- registry


def test_registry_defaults_and_validation_name_the_field():
    for name in NAMES:
        defaults = envs.section_defaults(name)
        assert "seed" not in defaults and envs.build_config(name, defaults, 5).seed == 5
    with pytest.raises(ValueError, match=r"config.agent.kg_search: unknown field\(s\) \['hops'\]"):
        envs.build_config("kg_search", {"hops": 2}, 0)
    with pytest.raises(ValueError, match=r"config.agent.grid_nav.size='4': expected int"):
        envs.build_config("grid_nav", {"size": "4"}, 0)
    with pytest.raises(ValueError, match=r"config.agent.grid_nav.slip=True: expected float"):
        envs.build_config("grid_nav", {"slip": True}, 0)
    assert envs.build_config("grid_nav", {"slip": 0}, 0).slip == 0  # an int is a float
    with pytest.raises(ValueError, match=r"config.agent.kg_search: KGSearchConfig.max_turns=2"):
        envs.build_config("kg_search", {"max_turns": 2}, 0)
    with pytest.raises(ValueError, match=r"config.agent.countdown_calc: CountdownConfig: need 2 <= min_numbers"):
        envs.build_config("countdown_calc", {"min_numbers": 1}, 0)
    with pytest.raises(ValueError, match="unknown env 'maze'; known: countdown_calc, grid_nav, guess_number"):
        envs.section_defaults("maze")
