"""The notebooks run end to end on a tiny run (nbclient, a real kernel): 01 trains it with experiments/train.py,
plots its curves and samples completions from its checkpoint; experiments/evaluate.py evaluates it; 02 compares
it with a second workdir. The committed 01 and 02 carry no outputs. The reproduction notebooks (03 to 07) are
committed WITH their outputs, drawn from the committed result files of experiments/reproduce.py; they are
re-executed here from those files."""

import os
import shutil
import subprocess
import sys

import nbclient
import nbformat
import pytest

from configs import default
from tests.test_train import tiny_config

NOTEBOOKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "notebooks")


def _flat(config, prefix=""):
    """{dotted field: value} of a ConfigDict."""
    out = {}
    for key, value in config.items():
        if hasattr(value, "items"):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _tiny_overrides() -> dict:
    """tiny_config (2 SFT + 2 RL steps) as --config.<field> overrides of the default config."""
    config = tiny_config()
    config.sft.steps = config.rl.steps = 2
    config.eval.every = config.checkpoint.every = 2
    base = _flat(default.get_config())
    return {k: v for k, v in _flat(config).items() if base[k] != v}


def _run_notebook(name: str, parameters: str, tmp_path) -> nbformat.NotebookNode:
    """Executes notebooks/<name> with its parameter cell's source replaced by `parameters`."""
    nb = nbformat.read(os.path.join(NOTEBOOKS, name), as_version=4)
    (cell,) = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    cell.source = parameters
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    return nb


def _outputs(nb, kind: str) -> list:
    """Every output of the executed notebook's code cells whose data or text holds `kind` (a MIME type or 'stream')."""
    found = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if kind == "stream" and out.output_type == "stream":
                found.append(out.text)
            elif kind in out.get("data", {}):
                found.append(out.data[kind])
    return found


@pytest.mark.parametrize("name", ["01_quickstart.ipynb", "02_compare_runs.ipynb"])
def test_committed_notebooks_have_no_outputs(name):
    nb = nbformat.read(os.path.join(NOTEBOOKS, name), as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


def test_notebooks_end_to_end_on_a_tiny_run(tmp_path):
    run = str(tmp_path / "tiny")
    nb = _run_notebook(
        "01_quickstart.ipynb",
        f"WORKDIR = ''\nRUN_DIR = {run!r}\nCONFIG_OVERRIDES = {_tiny_overrides()!r}\nNUM_COMPLETIONS = 3",
        tmp_path,
    )
    stdout = "".join(_outputs(nb, "stream"))
    assert "[rl] step    2" in stdout and "rl checkpoint, step 2" in stdout
    assert len(_outputs(nb, "image/png")) == 1  # the curves
    completions = _outputs(nb, "text/markdown")[-1]  # the sampled completions' table: header, rule, 3 rows
    assert completions.count("\n") == 4 and "| reward |" in completions

    other = str(tmp_path / "tiny_copy")
    shutil.copytree(run, other)  # a second workdir (without an eval json: 02 falls back on summary.json)
    out = subprocess.run(
        [sys.executable, "-m", "experiments.evaluate", f"--workdir={run}", "--k=1,2,4"],
        capture_output=True, text=True, check=False, timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "maj@4" in out.stdout and os.path.exists(os.path.join(run, "eval_rl_2.json"))

    nb = _run_notebook("02_compare_runs.ipynb", f"WORKDIRS = [{run!r}, {other!r}]\nLABELS = None\nCURVES = ['reward', 'eval/greedy_accuracy']", tmp_path)
    assert len(_outputs(nb, "image/png")) == 2  # the overlaid curves, the pass@k curves
    (table,) = _outputs(nb, "text/markdown")
    assert "| tiny |" in table and "| tiny_copy |" in table and "pass@2" in table


REPRODUCTIONS = {"03_entropy_mechanism.ipynb": ["entropy_mechanism"], "04_dapo_ladder.ipynb": ["dapo_ladder", "dapo_hard"],
                  "05_guidance.ipynb": ["guidance_hard", "guidance_hard_long", "guidance_guide"],
                  "06_online_dpo.ipynb": ["online_dpo", "pair_objectives"],
                  "07_reward_loop.ipynb": ["fapo", "reward_model", "reward_model_reward_models", "process_rewards",
                                           "learned_prm", "learned_prm_reward_models", "urpo", "urpo_long"],
                  "08_exit_and_pruning.ipynb": ["exit", "pruning"]}


@pytest.mark.parametrize("name", sorted(REPRODUCTIONS))
def test_reproduction_notebooks_are_committed_executed_and_run_from_the_committed_results(name):
    committed = nbformat.read(os.path.join(NOTEBOOKS, name), as_version=4)
    assert all(c.outputs for c in committed.cells if c.cell_type == "code" and "parameters" not in c.metadata.get("tags", [])), (
        f"{name}: committed without its outputs")
    for study in REPRODUCTIONS[name]:
        results = os.path.join(NOTEBOOKS, "results", f"{study}.jsonl")
        assert os.path.exists(results), f"{results} is missing: python -m experiments.reproduce --study={study}"
    nb = nbformat.read(os.path.join(NOTEBOOKS, name), as_version=4)
    # executed in notebooks/ (its RESULTS path is relative to it); the outputs stay in memory
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": NOTEBOOKS}}).execute()
    assert len(_outputs(nb, "image/png")) == len(_outputs(committed, "image/png")) >= 2
    assert _outputs(nb, "text/markdown")[0] == _outputs(committed, "text/markdown")[0]  # the same table, redrawn
