"""rl4llm.train.host_memory: after `reuse_freed_memory`, a large block freed by a worker thread is reused by the
next allocation (no page faults), where glibc's defaults unmap it and fault a fresh one in at every allocation."""

import platform
import subprocess
import sys

import pytest

# A worker thread (as XLA's) allocates, writes and frees 128 MB six times; prints the minor page faults per
# allocation after the first. A fresh process each: the setting must come before any thread allocates.
_CHURN = """
import ctypes, resource, sys, threading
from rl4llm.train import host_memory
applied = host_memory.reuse_freed_memory() if sys.argv[1] == "reuse" else None
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, (ctypes.c_size_t,), (ctypes.c_void_p,)
faults = []
def churn(n_bytes=128 << 20):
    for _ in range(6):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        block = libc.malloc(n_bytes)
        ctypes.memset(block, 1, n_bytes)
        libc.free(block)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
worker = threading.Thread(target=churn)
worker.start()
worker.join()
print(applied, sum(faults[1:]) / 5)
"""


def _faults_per_allocation(mode: str) -> tuple[str, float]:
    out = subprocess.run([sys.executable, "-c", _CHURN, mode], capture_output=True, text=True, check=True)
    applied, faults = out.stdout.split()
    return applied, float(faults)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_reuse_freed_memory_stops_per_allocation_page_faults():
    applied, reused = _faults_per_allocation("reuse")
    _, default = _faults_per_allocation("default")
    assert applied == "True"
    assert default > 30_000, default  # 128 MB of fresh 4 KiB pages: 32,768 faults
    assert reused < 100, reused
