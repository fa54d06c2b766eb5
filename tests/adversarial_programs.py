"""Adversarial Python programs, shared by the sandbox tests (tests/test_sandbox.py) and the python-tool tests
(tests/test_envs.py). Each would print ``ok`` (or pass its test) if its attack succeeded. Plus
:func:`uid_processes`, to check that nothing of a run survives it."""

import os

from rl4llm.rewards import sandbox

# Programs that signal "every process they can" are only safe where the sandbox cannot reach ours.
CONTAINED = sandbox.isolation() == "namespaces" or os.getuid() == 0

INFINITE_LOOP = "while True:\n    pass\nprint('ok')\n"
FORK_BOMB = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
SETSID_ESCAPE = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(100)\nprint('ok')\n"
MEMORY_BOMBS = (
    "x = bytearray(10 ** 10)\nprint('ok')\n",
    "chunks = []\nwhile True:\n    chunks.append('x' * 10 ** 7)\n",
)
# The first prints 50 MB at once; the others write megabytes forever (to stdout, to stderr).
HUGE_OUTPUTS = (
    "print('x' * 50_000_000)\nprint('ok')\n",
    "import os\nwhile True:\n    os.write(1, b'x' * 1_000_000)\n",
    "import sys\nwhile True:\n    sys.stderr.write('x' * 1_000_000)\n",
)
FORGED_RESULTS = (
    "import os\n"
    "for fd in map(int, os.listdir('/proc/self/fd')):\n"
    "    try:\n        os.write(fd, b'0' * 32 + b' {\"index\": 0, \"output\": \"ok\"}\\n')\n"
    "    except OSError:\n        pass\n"
    "raise SystemExit(1)\n"
)


def write_files(paths: list[str]) -> str:
    """A program that creates ``paths`` (and their directories) and writes ``pwned`` into each."""
    program = "import os\nfor path in %r:\n    os.makedirs(os.path.dirname(path), exist_ok=True)\n" % paths
    return program + "    with open(path, 'w') as f:\n        f.write('pwned')\nprint('ok')\n"


def connect(port: int) -> str:
    """A program that connects to 127.0.0.1:``port`` and sends ``pwned``."""
    return (
        "import socket\n"
        f"s = socket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
        "s.sendall(b'pwned')\nprint('ok')\n"
    )


def kill_processes(pids: list[int]) -> str:
    """A program that SIGKILLs ``pids``, its parent, every process it may signal, and its process group."""
    return (
        "import os, signal\n"
        f"for pid in {pids} + [os.getppid()]:\n"
        "    try:\n        os.kill(pid, signal.SIGKILL)\n    except OSError:\n        pass\n"
        "os.kill(-1, signal.SIGKILL)\nos.killpg(0, signal.SIGKILL)\nprint('ok')\n"
    )


def uid_processes(uid: int) -> list[int]:
    """The pids of the running processes of ``uid``."""
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
