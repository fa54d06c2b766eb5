"""The judge models placed on a device mesh (`config.mesh.judges`, `parallel.judges`): on 8 simulated devices the
outcome RM's, the PRM's and the P(Yes) verifier's scores on the shared and the disaggregated judges' mesh equal the
unplaced scores, their weights are sharded on the judges' devices, and the configs it cannot serve are refused
naming the field (tests/judges_mesh_check.py); an RL job with an RM disaggregated on 2 of the 8 devices runs and logs
`reward_model/score_mean` (tests/judges_mesh_run_check.py)."""

import pathlib
import subprocess
import sys

from tests import subprocess_env

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _run_check(script: str, *args: str) -> str:
    env = subprocess_env.simulated_cpu_devices(8, PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, str(ROOT / "tests" / script), *args], env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0 and "OK" in result.stdout, result.stdout + result.stderr[-5000:]
    return result.stdout


def test_judges_score_alike_on_shared_and_disaggregated_meshes_and_are_sharded():
    out = _run_check("judges_mesh_check.py")
    assert "disaggregated (1,2,2) beside a disaggregated sampler scores match" in out and "bad configs refused" in out


def test_an_rl_job_scores_with_an_rm_disaggregated_on_2_of_8_devices(tmp_path):
    out = _run_check("judges_mesh_run_check.py", str(tmp_path))
    assert "reward_model/score_mean" in out
