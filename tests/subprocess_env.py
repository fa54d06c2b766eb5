"""Environments of a test's subprocesses: several simulated CPU devices, or XLA's default compile flags."""

import os

# XLA flags of the test session (set by tests/conftest.py): LLVM -O0 and the classic fusion emitters, for compile speed.
TEST_XLA_FLAGS = ("--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false")


def simulated_cpu_devices(count: int, **extra: str) -> dict:
    """os.environ with `count` simulated CPU devices added to $XLA_FLAGS (the test session's compile flags and
    compilation cache, set by tests/conftest.py, carry over), JAX on the CPU, and `extra` variables."""
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={count}".strip()
    return dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu", **extra)


def default_xla_flags() -> dict:
    """os.environ without the test session's compile flags (TEST_XLA_FLAGS): the subprocess
    compiles as the binaries do, for properties of XLA's default compile (the compilation cache carries over: its
    keys include the flags)."""
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if f not in TEST_XLA_FLAGS]
    return dict(os.environ, XLA_FLAGS=" ".join(flags))
