"""Sandboxed execution of generated Python against test cases; the ``code`` rewards.

:func:`run_tests` runs a program in a fresh subprocess (``sandbox_harness.py``) with

* **namespaces** (when the kernel and our privileges allow; :func:`isolation` says which mode is in force):
  ``unshare --net --pid --mount --fork --kill-child``: no network (a fresh network namespace whose loopback is
  down: connects fail, even to the host's 127.0.0.1), its own pid namespace (it cannot see or signal host
  processes, and every process it starts dies with it), and private tmpfs over ``/tmp``, ``/var/tmp``,
  ``/dev/shm``, ``/run/lock`` holding the fresh work directory, so no write survives the run;
* **an unprivileged uid** (when we are root; ``SANDBOX_UID_BASE`` + pid of the scoring process, so two concurrent
  sandboxes never share a process count): it cannot write anything the host owns, and RLIMIT_NPROC binds;
* **resource limits** (:class:`Limits`): CPU seconds, address space, processes, file size, open files, no core
  files, ``PR_SET_NO_NEW_PRIVS``;
* **a wall-clock timeout** after which the whole process group gets SIGKILL (with namespaces, killing the
  namespace's pid 1 takes every process in it, including ones that called ``setsid``); without a pid namespace
  but as root, every process of the sandbox uid is killed too;
* **a scrubbed environment** (``PATH``, ``LANG``, ``HOME`` only), ``python -I -S`` (no site-packages, no user
  site, no ``PYTHON*`` variables), stdin from ``/dev/null``, stdout / stderr discarded, captured output capped.

Fallback (documented, weaker): where ``unshare`` is refused, programs run with the limits, the uid drop (root
only) and the timeout, but WITH network access and with write access to world-writable directories; as a
non-root user also without the uid drop, so they can touch that user's files and RLIMIT_NPROC counts all of
that user's processes. Use namespaces (run as root, or in a container) for untrusted code at scale.

Reward (:func:`score`): the reference answer is JSON ``{"tests": [...]}`` with tests ``{"input", "output"}``
(stdout compared after stripping trailing whitespace per line) or ``{"assert": "assert f(2) == 4"}``; the program
is the last fenced code block of the completion (or the whole completion when there is none). Reward = fraction
of tests passed (verl ``prime_code`` "continuous" mode); :func:`score_all_pass` = 1 iff every test passed.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Sequence

SANDBOX_UID_BASE = 200_000
_HARNESS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_harness.py")
_UNSHARE = ("unshare", "--net", "--pid", "--mount", "--fork", "--kill-child")
_ISOLATED_WORKDIR = "/tmp/sandbox"
_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
# Result bytes read from the harness beyond the tests' captured output (JSON framing, error names).
_RESULT_OVERHEAD_BYTES = 1 << 16


@dataclasses.dataclass(frozen=True)
class Limits:
    """Per-run limits. ``wall_s`` covers interpreter start-up and every test of the run together."""

    wall_s: float = 10.0
    cpu_s: int = 5
    memory_mb: int = 512
    nproc: int = 16
    file_mb: int = 16
    open_files: int = 64
    max_output_bytes: int = 1 << 20


@dataclasses.dataclass(frozen=True)
class Result:
    """Outcome of one run: ``passed`` of ``total`` tests. ``status``: "ok" (every test ran), "timeout" (the wall
    clock ran out), "incomplete" (the run ended early: a CPU or memory limit, a crash, ``os._exit``...), "error"
    (the program does not compile, or the sandbox could not start)."""

    passed: int
    total: int
    status: str
    detail: str = ""

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


@functools.cache
def isolation() -> str:
    """"namespaces" if ``unshare --net --pid --mount`` works here, else "none" (see the module docstring)."""
    if shutil.which("unshare") is None:
        return "none"
    try:
        ok = subprocess.run([*_UNSHARE, "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return "namespaces" if ok else "none"


@functools.cache
def _python() -> str:
    """The interpreter for sandboxed programs: the system one when present (its standard library is readable by
    the unprivileged sandbox uid; a virtualenv's base interpreter may live under an unreadable home), else ours."""
    return "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable


def _sandbox_uid() -> int:
    return SANDBOX_UID_BASE + os.getpid() % 100_000


def _kill_uid(uid: int) -> None:
    """SIGKILL every process of ``uid`` (a forked helper that becomes ``uid`` and calls ``kill(-1)``); root only."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgid(uid)
            os.setuid(uid)
            os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def _stop(proc: subprocess.Popen, *, namespaces: bool) -> None:
    """Ends a run and waits until none of its processes is left.

    With namespaces: SIGKILL to the namespace's pid 1 (the harness under ``unshare``); the kernel kills every
    other process of the namespace before pid 1 is reaped, so once ``unshare`` has reaped it and exited, nothing
    of the run is left (killing ``unshare`` itself first would orphan pid 1 and return before that). Otherwise, or
    if that fails: SIGKILL to the whole process group.
    """
    if namespaces and proc.poll() is None:
        try:
            with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
                for child in f.read().split():
                    os.kill(int(child), signal.SIGKILL)
            proc.wait(timeout=5)
            return
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _read_results(fd: int, deadline: float, max_bytes: int, end: bytes) -> tuple[bytes, bool]:
    """Reads ``fd`` until the data ends with ``end`` (the harness's nonce-stamped last line), EOF, the deadline or
    ``max_bytes``; returns (data, whether the harness got to its end line)."""
    data = bytearray()
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or len(data) > max_bytes:
            return bytes(data), False
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 16)
        data += chunk
        if not chunk or data.endswith(end):
            return bytes(data), data.endswith(end)


def _passed(test: dict, record: dict) -> bool:
    if "assert" in test:
        return record.get("passed") is True
    output = record.get("output")
    if not isinstance(output, str):
        return False
    normalise = lambda s: "\n".join(line.rstrip() for line in s.strip().splitlines())  # noqa: E731
    return normalise(output) == normalise(test["output"])


def run_tests(program: str, tests: Sequence[dict], limits: Limits = Limits()) -> Result:
    """Runs ``program`` against ``tests`` in the sandbox (module docstring). Never raises on any program."""
    if not tests:
        raise ValueError("run_tests needs at least one test")
    records, status, detail = _execute(program, tests, limits)
    passed = sum(_passed(t, records[i]) for i, t in enumerate(tests) if i in records)
    return Result(passed, len(tests), status, detail)


def run_program(program: str, stdin: str = "", limits: Limits = Limits()) -> tuple[str, str | None]:
    """Runs ``program`` once as ``__main__`` on ``stdin`` in the sandbox; returns (status, its captured stdout),
    the output None unless it ended normally (status as :class:`Result`'s; the python tool of ``rl4llm.envs``).
    Never raises on any program."""
    records, status, _ = _execute(program, [{"input": stdin, "output": ""}], limits)
    output = records.get(0, {}).get("output")
    return status, output if isinstance(output, str) else None


def _execute(program: str, tests: Sequence[dict], limits: Limits) -> tuple[dict[int, dict], str, str]:
    """Runs ``program`` on ``tests`` in the sandbox; returns (the harness's result records by test index, status,
    detail), status as :class:`Result`'s."""
    mode = isolation()
    as_root = os.getuid() == 0
    uid = _sandbox_uid()
    nonce = secrets.token_hex(16)
    workdir = _ISOLATED_WORKDIR if mode == "namespaces" else tempfile.mkdtemp(prefix="rl4llm_sandbox_")
    spec = {
        "nonce": nonce,
        "program": program,
        "tests": list(tests),
        "limits": dataclasses.asdict(limits),
        "uid": uid,
        "isolated": mode == "namespaces",
        "workdir": workdir,
    }
    read_fd, write_fd = os.pipe()
    prefix = list(_UNSHARE) if mode == "namespaces" else []
    cmd = [*prefix, _python(), "-I", "-S", _HARNESS, "--result-fd", str(write_fd)]
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": workdir}
    deadline = time.monotonic() + limits.wall_s
    proc = None
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(write_fd,),
            env=env,
            cwd="/",
            start_new_session=True,
        )
        os.close(write_fd)
        write_fd = -1
        try:
            proc.stdin.write(json.dumps(spec).encode())
            proc.stdin.close()
        except BrokenPipeError:
            pass
        max_bytes = len(tests) * (limits.max_output_bytes * 4 + _RESULT_OVERHEAD_BYTES)
        data, finished = _read_results(read_fd, deadline, max_bytes, f"{nonce} done\n".encode())
    except OSError as e:
        return {}, "error", f"sandbox failed to start: {e}"
    finally:
        if write_fd >= 0:
            os.close(write_fd)
        os.close(read_fd)
        if proc is not None:
            _stop(proc, namespaces=mode == "namespaces")
        if as_root and mode != "namespaces":
            _kill_uid(uid)
        if mode != "namespaces":
            shutil.rmtree(workdir, ignore_errors=True)
    records = {}
    for line in data.decode("utf-8", errors="replace").splitlines():
        head, _, body = line.partition(" ")
        if head != nonce:
            continue
        try:
            record = json.loads(body)
            records[int(record["index"])] = record
        except (ValueError, KeyError, TypeError):
            continue
    if -1 in records:
        return {}, "error", str(records[-1].get("error"))
    if finished:
        return records, "ok", ""
    return records, "timeout" if time.monotonic() >= deadline else "incomplete", ""


def extract_program(completion: str) -> str:
    """The last fenced code block of ``completion`` (```python / ```py / ```), or the whole text if none."""
    blocks = _FENCE.findall(completion)
    return blocks[-1] if blocks else completion


def _tests_of(answer: str) -> list[dict]:
    """The test list of a reference answer ``{"tests": [...]}``; ValueError (a task bug) when malformed."""
    tests = json.loads(answer)["tests"]
    if not tests or not all(isinstance(t, dict) and ("assert" in t or {"input", "output"} <= t.keys()) for t in tests):
        raise ValueError(f"malformed code tests in reference answer: {answer[:200]!r}")
    return tests


def score(completion: str, answer: str) -> float:
    """Fraction of the reference answer's tests that the completion's program passes."""
    return run_tests(extract_program(completion), _tests_of(answer)).fraction


def score_all_pass(completion: str, answer: str) -> float:
    """1.0 iff the completion's program passes every test of the reference answer."""
    result = run_tests(extract_program(completion), _tests_of(answer))
    return 1.0 if result.passed == result.total else 0.0
