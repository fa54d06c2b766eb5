"""The code sandbox (rl4llm.rewards.sandbox): real subprocesses, real limits, adversarial programs.

Every adversarial program would pass its test if its attack succeeded; each must end with reward 0, the
machine unharmed (no process of the sandbox uid left, no file written outside, no connection made) and the
calling process alive. Limits are small so the whole file runs in a few seconds on 2 shared cores.
"""

import json
import os
import socket
import subprocess
import time

import pytest

import adversarial_programs as adv
from rl4llm.rewards import sandbox

FAST = sandbox.Limits(wall_s=3.0, cpu_s=2, nproc=8, memory_mb=256)
# For programs expected to run out of time: a shorter wall clock keeps the file fast.
LOOP = sandbox.Limits(wall_s=1.5, cpu_s=1, nproc=8, memory_mb=256)
needs_containment = pytest.mark.skipif(
    not adv.CONTAINED, reason="no namespaces and not root: this attack would reach this user's own processes"
)


def _attack(program: str, expected_output: str = "ok", limits: sandbox.Limits = FAST) -> sandbox.Result:
    result = sandbox.run_tests(program, [{"input": "", "output": expected_output}], limits)
    assert result.passed == 0 and result.fraction == 0.0, result
    if os.getuid() == 0:
        assert adv.uid_processes(sandbox._sandbox_uid()) == [], "processes of the sandbox uid survived the run"
    return result


# ------------------------------------------------------------------------------------------ behaviour


def test_io_tests_fraction_and_all_pass():
    program = "a, b = map(int, input().split())\nprint(a + b)\n"
    tests = [{"input": "1 2", "output": "3"}, {"input": "5 5\n", "output": "10\n"}, {"input": "1 1", "output": "3"}]
    result = sandbox.run_tests(program, tests, FAST)
    assert (result.passed, result.total, result.status) == (2, 3, "ok")
    answer = json.dumps({"tests": tests})
    assert sandbox.score(f"Here:\n```python\n{program}```\n", answer) == pytest.approx(2 / 3)
    assert sandbox.score_all_pass(f"```python\n{program}```", answer) == 0.0
    assert sandbox.score_all_pass(f"```python\n{program}```", json.dumps({"tests": tests[:2]})) == 1.0


def test_assert_tests_share_the_program_namespace():
    program = "def double(x):\n    return 2 * x\n"
    tests = [{"assert": "assert double(2) == 4"}, {"assert": "assert double(3) == 5"}, {"assert": "assert double(0) == 0"}]
    assert sandbox.run_tests(program, tests, FAST).passed == 2


def test_syntax_error_runtime_error_and_nonzero_exit_score_zero():
    assert sandbox.run_tests("def f(:\n", [{"assert": "assert True"}], FAST).status == "error"
    assert sandbox.run_tests("1/0", [{"input": "", "output": ""}], FAST).passed == 0
    assert sandbox.run_tests("import os; os._exit(0)", [{"input": "", "output": ""}], FAST).status == "incomplete"
    assert sandbox.run_tests("import sys; print('ok'); sys.exit(3)", [{"input": "", "output": "ok"}], FAST).passed == 0
    assert sandbox.run_tests("import sys; print('ok'); sys.exit(0)", [{"input": "", "output": "ok"}], FAST).passed == 1


def test_last_fenced_block_is_the_program():
    text = "```python\nprint(1)\n```\nbetter:\n```py\nprint(2)\n```"
    assert sandbox.extract_program(text) == "print(2)\n"
    assert sandbox.extract_program("print(3)") == "print(3)"


def test_environment_is_scrubbed_and_unprivileged():
    uid = sandbox._sandbox_uid() if os.getuid() == 0 else os.getuid()
    program = "import os\nprint(' '.join(sorted(os.environ)), os.getuid())\n"
    assert sandbox.run_tests(program, [{"input": "", "output": f"HOME LANG PATH {uid}"}], FAST).passed == 1


def test_malformed_reference_answer_is_a_task_bug():
    with pytest.raises(ValueError):
        sandbox.score("print(1)", json.dumps({"tests": [{"input": "1"}]}))


def test_a_timeout_keeps_the_tests_finished_before_it():
    program = "import sys\nn = int(input())\nwhile n == 2:\n    pass\nprint(n)\n"
    tests = [{"input": "1", "output": "1"}, {"input": "2", "output": "2"}, {"input": "3", "output": "3"}]
    result = sandbox.run_tests(program, tests, sandbox.Limits(wall_s=1.5, cpu_s=5))
    assert (result.passed, result.status) == (1, "timeout")


# ---------------------------------------------------------------------------------------- adversarial


def test_infinite_loop():
    start = time.monotonic()
    _attack(adv.INFINITE_LOOP, limits=LOOP)
    assert time.monotonic() - start < LOOP.wall_s + 2


@needs_containment
def test_fork_bomb_is_bounded_and_fully_killed():
    _attack(adv.FORK_BOMB, limits=LOOP)


@needs_containment
def test_background_process_escaping_with_setsid_is_killed():
    result = sandbox.run_tests(adv.SETSID_ESCAPE, [{"input": "", "output": "ok"}], FAST)
    assert (result.passed, result.status) == (1, "ok")  # the program did what its test asked, in time...
    if os.getuid() == 0:
        assert adv.uid_processes(sandbox._sandbox_uid()) == []  # ...and its detached child is gone


def test_memory_bomb():
    for program in adv.MEMORY_BOMBS:
        _attack(program)


def test_writing_outside_the_work_directory(tmp_path):
    repo_file = os.path.join(os.path.dirname(sandbox.__file__), "ESCAPED_FROM_SANDBOX")
    targets = [str(tmp_path / "escaped"), repo_file, os.path.expanduser("~/ESCAPED_FROM_SANDBOX")]
    try:
        _attack(adv.write_files(targets))
        for path in targets:
            assert not os.path.exists(path), path
    finally:
        for path in targets[1:]:
            if os.path.exists(path):
                os.remove(path)


def test_network_is_unreachable():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.setblocking(False)
    port = server.getsockname()[1]
    try:
        result = sandbox.run_tests(adv.connect(port), [{"input": "", "output": "ok"}], FAST)
        if sandbox.isolation() == "namespaces":
            assert result.passed == 0
            with pytest.raises(BlockingIOError):
                server.accept()  # nobody connected
        else:  # documented fallback: the network is NOT isolated without namespaces
            assert result.passed == 1
    finally:
        server.close()


@needs_containment
def test_killing_the_parent_and_other_processes():
    bystander = subprocess.Popen(["sleep", "30"])
    try:
        _attack(adv.kill_processes([os.getpid(), os.getppid(), bystander.pid, 1]))
        assert bystander.poll() is None, "the sandbox killed a host process"
    finally:
        bystander.kill()
        bystander.wait()


def test_printing_megabytes():
    first, *forever = adv.HUGE_OUTPUTS
    _attack(first)
    for program in forever:
        _attack(program, limits=LOOP)


def test_forged_result_lines_are_ignored():
    _attack(adv.FORGED_RESULTS)
