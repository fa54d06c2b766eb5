"""Runs inside the code sandbox (``rl4llm.rewards.sandbox``): standard library only, started as ``python -I -S``.

Protocol: the host writes one JSON object to stdin (``nonce``, ``program``, ``tests``, ``limits``, ``uid``,
``isolated``, ``workdir``) and closes it. This process then

1. (isolated mode: it is pid 1 of fresh pid / mount / network namespaces, as root there) mounts size-limited tmpfs
   over every world-writable directory (``/tmp``, ``/var/tmp``, ``/dev/shm``, ``/run/lock``) and creates the work
   directory inside the new ``/tmp``, so nothing the program writes outlives the run or reaches the host;
2. forks the runner and waits for it (pid 1 then exits, which makes the kernel kill every process left in the
   namespace); the runner sets the resource limits, drops to the unprivileged sandbox uid (when started as root),
   and runs the tests:

   * ``{"input": s, "output": t}``: the program runs as ``__main__`` with ``sys.stdin = s``; its captured stdout
     (capped at ``max_output_bytes``) is reported and the host compares it with ``t``;
   * ``{"assert": code}``: the program runs once, then each assert snippet in its namespace; pass = no exception.

Each test's result is one line ``<nonce> <json>`` on the result file descriptor (``--result-fd``), written as soon
as the test ends, so a run killed half-way still reports the tests it finished; ``<nonce> done`` ends the run
(the host stops reading there, even if a process the program left behind still holds the descriptor). The nonce is
read from stdin before the program runs and lives only in this process's memory, so a program cannot forge result
lines without digging it out of the interpreter's memory (documented limitation of in-process harnesses).
"""

import ctypes
import io
import json
import os
import resource
import sys

_WRITABLE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
_PR_SET_NO_NEW_PRIVS = 38
_MS_NOSUID, _MS_NODEV = 2, 4


class _CappedWriter(io.StringIO):
    """A text buffer that raises once more than ``limit`` characters were written."""

    def __init__(self, limit):
        super().__init__()
        self._left = limit

    def write(self, s):
        self._left -= len(s)
        if self._left < 0:
            raise OSError("output limit exceeded")
        return super().write(s)


def _mount_private_tmpfs(size_mb):
    libc = ctypes.CDLL(None, use_errno=True)
    for path in _WRITABLE_DIRS:
        if os.path.isdir(path):
            options = f"size={size_mb}m,mode=1777".encode()
            if libc.mount(b"tmpfs", path.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, options) != 0:
                raise OSError(ctypes.get_errno(), f"mount tmpfs on {path}")


def _set_limits(limits):
    def both(kind, value):
        resource.setrlimit(kind, (value, value))

    resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_s"], limits["cpu_s"] + 1))
    both(resource.RLIMIT_AS, limits["memory_mb"] << 20)
    both(resource.RLIMIT_NPROC, limits["nproc"])
    both(resource.RLIMIT_FSIZE, limits["file_mb"] << 20)
    both(resource.RLIMIT_NOFILE, limits["open_files"])
    both(resource.RLIMIT_CORE, 0)


def _drop_privileges(uid, workdir):
    if os.getuid() != 0:
        return
    os.chown(workdir, uid, uid)
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    ctypes.CDLL(None).prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


def _run_io_test(code, test, limit):
    """The program's stdout on ``test["input"]`` (None if it raised, or exited non-zero)."""
    out = _CappedWriter(limit)
    sys.stdin, sys.stdout = io.StringIO(test["input"]), out
    try:
        exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
    except SystemExit as e:
        if e.code not in (None, 0):
            return None
    except BaseException:  # the program's own errors, MemoryError, RecursionError... all mean "failed"
        return None
    finally:
        sys.stdin, sys.stdout = sys.__stdin__, sys.__stdout__
    return out.getvalue()


def _runner(spec, result_fd):
    """The forked child: limits, privilege drop, then one result line per test."""
    nonce, limits = spec["nonce"], spec["limits"]
    report = os.fdopen(result_fd, "w", buffering=1)
    dumps = json.dumps

    def emit(index, record):
        report.write(nonce + " " + dumps(dict(record, index=index)) + "\n")

    os.chdir(spec["workdir"])
    _set_limits(limits)
    _drop_privileges(spec["uid"], spec["workdir"])
    program, tests = spec["program"], spec["tests"]
    del spec
    try:
        code = compile(program, "<program>", "exec")
    except BaseException as e:  # SyntaxError, or a MemoryError on a huge program
        emit(-1, {"error": type(e).__name__})
        return
    namespace = None
    for i, test in enumerate(tests):
        if "assert" in test:
            try:
                if namespace is None:
                    namespace = {"__name__": "__sandbox__", "__builtins__": __builtins__}
                    sys.stdout = _CappedWriter(limits["max_output_bytes"])
                    exec(code, namespace)
                exec(compile(test["assert"], "<test>", "exec"), namespace)
                emit(i, {"passed": True})
            except BaseException as e:
                emit(i, {"passed": False, "error": type(e).__name__})
            finally:
                sys.stdout = sys.__stdout__
        else:
            emit(i, {"output": _run_io_test(code, test, limits["max_output_bytes"])})
    report.write(nonce + " done\n")


def main():
    result_fd = int(sys.argv[sys.argv.index("--result-fd") + 1])
    spec = json.loads(sys.stdin.read())
    sys.stdin.close()
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    if spec["isolated"]:
        _mount_private_tmpfs(spec["limits"]["file_mb"] * 4)
        os.mkdir(spec["workdir"], 0o700)
    pid = os.fork()
    if pid == 0:
        try:
            _runner(spec, result_fd)
        finally:
            os._exit(0)
    os.close(result_fd)
    os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
