"""The judge models placed on a device mesh (`config.mesh.judges`, `parallel.judges`), on 8 simulated devices in one
subprocess (tests/judges_mesh_check.py): the outcome RM's, the PRM's, the P(Yes) verifier's scores and the sampled
critiques on the shared and the disaggregated judges' mesh equal the unplaced ones, their weights are sharded on the
judges' devices, the configs it cannot serve are refused naming the field; an RL job with an RM disaggregated on 2 of
the 8 devices runs and logs `reward_model/score_mean`."""

import pathlib
import subprocess
import sys

import pytest

from tests import subprocess_env

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def check_output(tmp_path_factory) -> str:
    """The stdout of tests/judges_mesh_check.py (run once for the module); fails unless it exits 0 with OK."""
    env = subprocess_env.simulated_cpu_devices(8, PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, str(ROOT / "tests" / "judges_mesh_check.py"),
                             str(tmp_path_factory.mktemp("judges_mesh"))], env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0 and "OK" in result.stdout, result.stdout + result.stderr[-5000:]
    return result.stdout


def test_judges_score_alike_on_shared_and_disaggregated_meshes_and_are_sharded(check_output):
    for line in ("shared (2,2,2) scores match", "disaggregated (1,2,2) beside a disaggregated sampler scores match",
                 "co-trained RM sharded with the state", "bad configs refused"):
        assert line in check_output


def test_an_rl_job_scores_with_an_rm_disaggregated_on_2_of_8_devices(check_output):
    assert "RL job: reward_model/score_mean" in check_output
