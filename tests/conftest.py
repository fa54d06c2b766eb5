"""Test processes compile for speed, share XLA's compiled programs, and keep freed memory for reuse as the binaries
do (rl4llm.train.host_memory).

Compile options. Most tests build tiny models whose programs take far longer to compile than to run, so the suite
compiles with XLA's CPU backend at LLVM -O0 and the classic fusion emitters (`TEST_XLA_FLAGS`): the same HLO after
XLA's own optimisation passes, code-generated without LLVM's optimiser. On the nano job this cuts the learner step's
compile from 11.4 s to 2.6 s (sampler 11.4 -> 3.1 s, SFT step 6.2 -> 1.6 s); results agree up to float rounding.
Binaries keep XLA's defaults. Subprocesses inherit the flags through the environment (tests/subprocess_env.py:
also the environment without them, for checks of XLA's default compile).

Compilation cache. Every process of one test session (the xdist workers, and the binaries and checks the tests
start as subprocesses) uses one JAX persistent compilation cache directory, fresh for the session and removed at
its end unless `RL4LLM_TEST_COMPILATION_CACHE` names a directory to keep between runs. A size limit turns on JAX's
file lock around each read and write, so processes share the directory safely. Entries are keyed by the program's
HLO, the compile options and the JAX/XLA versions, so a hit is the executable XLA would have built: tests still
trace and lower every program (jit's own caches and the `_cache_size` counters behave as without it), only XLA's
compile is skipped.
"""

import atexit
import os
import shutil
import tempfile

from tests.subprocess_env import TEST_XLA_FLAGS

_CACHE_BYTES = 16 << 30


def _set_compile_environment() -> None:
    """Adds TEST_XLA_FLAGS to $XLA_FLAGS and names the session's cache, once per session: the first process (the
    xdist controller, or pytest without xdist) creates the directory and removes it at exit; its workers and
    subprocesses inherit the environment."""
    flags = os.environ.get("XLA_FLAGS", "").split()
    os.environ["XLA_FLAGS"] = " ".join(flags + [f for f in TEST_XLA_FLAGS if f not in flags])
    if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
        kept = os.environ.get("RL4LLM_TEST_COMPILATION_CACHE")
        cache_dir = kept or tempfile.mkdtemp(prefix="rl4llm_xla_cache_")
        if not kept:
            atexit.register(shutil.rmtree, cache_dir, ignore_errors=True)
        os.environ["JAX_COMPILATION_CACHE_DIR"] = cache_dir
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")
    os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(_CACHE_BYTES))


_set_compile_environment()

import jax  # noqa: E402  (after the environment it reads)

from rl4llm.train import host_memory  # noqa: E402

host_memory.reuse_freed_memory()
jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
jax.config.update("jax_persistent_cache_min_compile_time_secs",
                  float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]))
jax.config.update("jax_compilation_cache_max_size", int(os.environ["JAX_COMPILATION_CACHE_MAX_SIZE"]))
