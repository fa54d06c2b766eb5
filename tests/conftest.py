"""Every test process keeps freed memory for reuse, as the binaries do (rl4llm.train.host_memory), and shares XLA's
compiled programs between its tests through JAX's persistent compilation cache.

Most tests build the same tiny models' sampler, learner and evaluation programs, and on a 2-core machine compiling
them costs more than running them. Each test process gets its own cache directory (no two processes write one
file), fresh per run and removed at its end unless `RL4LLM_TEST_COMPILATION_CACHE` names a directory to keep
between runs. Entries are keyed by the program's HLO, the compile options and the JAX/XLA versions, so a hit is the
executable XLA would have built: tests still trace and lower every program (jit's own caches and the
`_cache_size` counters behave as without it), only XLA's compile is skipped.
"""

import atexit
import os
import shutil
import tempfile

import jax

from rl4llm.train import host_memory

host_memory.reuse_freed_memory()

_worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
_kept = os.environ.get("RL4LLM_TEST_COMPILATION_CACHE")
if _kept:
    _cache_dir = os.path.join(_kept, _worker)
else:
    _cache_dir = tempfile.mkdtemp(prefix=f"rl4llm_xla_cache_{_worker}_")
    atexit.register(shutil.rmtree, _cache_dir, ignore_errors=True)
jax.config.update("jax_compilation_cache_dir", _cache_dir)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
