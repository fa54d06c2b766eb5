"""Kernels give the same result with inputs sharded over 8 simulated devices as on one device."""

import os
import pathlib
import subprocess
import sys


def test_sharded_matches_single_device():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    script = pathlib.Path(__file__).with_name("sharded_check.py")
    result = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK" in result.stdout
