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

from rl4llm.rewards import sandbox

FAST = sandbox.Limits(wall_s=3.0, cpu_s=2, nproc=8, memory_mb=256)
# For programs expected to run out of time: a shorter wall clock keeps the file fast.
LOOP = sandbox.Limits(wall_s=1.5, cpu_s=1, nproc=8, memory_mb=256)
# Programs that signal "every process they can" are only safe where the sandbox cannot reach ours.
CONTAINED = sandbox.isolation() == "namespaces" or os.getuid() == 0
needs_containment = pytest.mark.skipif(
    not CONTAINED, reason="no namespaces and not root: this attack would reach this user's own processes"
)


def _uid_processes(uid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            pids.append(int(entry))
                        break
        except OSError:
            continue
    return pids


def _attack(program: str, expected_output: str = "ok", limits: sandbox.Limits = FAST) -> sandbox.Result:
    result = sandbox.run_tests(program, [{"input": "", "output": expected_output}], limits)
    assert result.passed == 0 and result.fraction == 0.0, result
    if os.getuid() == 0:
        assert _uid_processes(sandbox._sandbox_uid()) == [], "processes of the sandbox uid survived the run"
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
    _attack("while True:\n    pass\nprint('ok')\n", limits=LOOP)
    assert time.monotonic() - start < LOOP.wall_s + 2


@needs_containment
def test_fork_bomb_is_bounded_and_fully_killed():
    _attack("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n", limits=LOOP)


@needs_containment
def test_background_process_escaping_with_setsid_is_killed():
    program = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(100)\nprint('ok')\n"
    result = sandbox.run_tests(program, [{"input": "", "output": "ok"}], FAST)
    assert (result.passed, result.status) == (1, "ok")  # the program did what its test asked, in time...
    if os.getuid() == 0:
        assert _uid_processes(sandbox._sandbox_uid()) == []  # ...and its detached child is gone


def test_memory_bomb():
    _attack("x = bytearray(10 ** 10)\nprint('ok')\n")
    _attack("chunks = []\nwhile True:\n    chunks.append('x' * 10 ** 7)\n")


def test_writing_outside_the_work_directory(tmp_path):
    repo_file = os.path.join(os.path.dirname(sandbox.__file__), "ESCAPED_FROM_SANDBOX")
    targets = [str(tmp_path / "escaped"), repo_file, os.path.expanduser("~/ESCAPED_FROM_SANDBOX")]
    program = "import os\nfor path in %r:\n    os.makedirs(os.path.dirname(path), exist_ok=True)\n" % targets
    program += "    with open(path, 'w') as f:\n        f.write('pwned')\nprint('ok')\n"
    try:
        _attack(program)
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
    program = (
        "import socket\n"
        f"s = socket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
        "s.sendall(b'pwned')\nprint('ok')\n"
    )
    try:
        result = sandbox.run_tests(program, [{"input": "", "output": "ok"}], FAST)
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
        targets = [os.getpid(), os.getppid(), bystander.pid, 1]
        program = (
            "import os, signal\n"
            f"for pid in {targets} + [os.getppid()]:\n"
            "    try:\n        os.kill(pid, signal.SIGKILL)\n    except OSError:\n        pass\n"
            "os.kill(-1, signal.SIGKILL)\nos.killpg(0, signal.SIGKILL)\nprint('ok')\n"
        )
        _attack(program)
        assert bystander.poll() is None, "the sandbox killed a host process"
    finally:
        bystander.kill()
        bystander.wait()


def test_printing_megabytes():
    _attack("print('x' * 50_000_000)\nprint('ok')\n")
    _attack("import os\nwhile True:\n    os.write(1, b'x' * 1_000_000)\n", limits=LOOP)
    _attack("import sys\nwhile True:\n    sys.stderr.write('x' * 1_000_000)\n", limits=LOOP)


def test_forged_result_lines_are_ignored():
    program = (
        "import os\n"
        "for fd in map(int, os.listdir('/proc/self/fd')):\n"
        "    try:\n        os.write(fd, b'0' * 32 + b' {\"index\": 0, \"output\": \"ok\"}\\n')\n"
        "    except OSError:\n        pass\n"
        "raise SystemExit(1)\n"
    )
    _attack(program)
