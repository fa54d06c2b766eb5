"""rl4llm.config: every field declared once (default, doc, bound), the editable form and the typed one agree,
`parse` names every invalid field at once, and the typed config is frozen."""

from __future__ import annotations

import dataclasses
import pathlib

import pytest

from configs import default
from rl4llm import config as config_lib
from rl4llm import envs
from rl4llm.config import fields, overrides, sections
from rl4llm.data import tasks


def _fields(node, path=""):
    """(dotted path, dataclasses.Field, default value) of every leaf field of a section, recursively."""
    for field in dataclasses.fields(node):
        value = getattr(node, field.name)
        if dataclasses.is_dataclass(value):
            yield from _fields(value, f"{path}{field.name}.")
        else:
            yield f"{path}{field.name}", field, value


def _get(node, path):
    for name in path.split("."):
        node = getattr(node, name)
    return node


def test_every_field_has_a_doc_and_its_default_is_within_its_bound():
    leaves = list(_fields(sections.RunConfig()))
    assert len(leaves) > 150
    for path, field, value in leaves:
        assert field.metadata["doc"], path
        check = field.metadata["check"]
        assert check is None or check.error(value) is None, (path, value, check.error(value))


def test_editable_and_typed_forms_have_the_same_fields_and_defaults_round_trip():
    editable = config_lib.defaults()
    paths = set(overrides.field_paths(editable))
    typed = {path for path, _, _ in _fields(sections.RunConfig())}
    assert typed <= paths
    # Besides the sections themselves, the editable form spells out the fields of the dict fields (task / env
    # sub-sections, the *_kwargs placeholders).
    for path in paths - typed:
        assert path.rsplit(".", 1)[0] in typed or dataclasses.is_dataclass(_get(sections.RunConfig(), path)), path
    assert config_lib.parse(editable) == sections.RunConfig()
    assert config_lib.parse(default.get_config()) == sections.RunConfig()


def test_sub_sections_cover_every_task_and_env():
    run = sections.RunConfig()
    for name in tasks.SECTIONS:
        assert getattr(run.task, name) == tasks.section_defaults(name)
    for name in envs.ENVS:
        assert getattr(run.agent, name) == envs.section_defaults(name)


def test_kwargs_keep_only_the_set_hyper_parameters():
    c = config_lib.defaults()
    assert c.rl.loss_kwargs.clip_high is None  # every hyper-parameter of every loss is a field
    c.rl.loss = "cispo"
    c.rl.loss_kwargs.clip_high = 5.0
    assert config_lib.parse(c).rl.loss_kwargs == {"clip_high": 5.0}


def test_parse_names_every_invalid_field_at_once():
    c = config_lib.defaults()
    c.rl.lr = 1e-3  # a new field a recipe made up
    c.sampling.temperature = 0.0  # out of its bound
    c.model.lora.targets = ("q_proj", "w_gate")  # not a projection
    c.selection.acc_low, c.selection.acc_high = 0.9, 0.1  # a check across fields of another section
    c.rl.kl_target = 0.1  # adaptive KL with KL off: across fields of the section with the unknown one
    with pytest.raises(config_lib.ConfigError) as e:
        config_lib.parse(c)
    message = str(e.value)
    for expected in ("config.rl.lr: unknown field of config.rl", "config.sampling.temperature=0.0: must lie in (0.0",
                     "config.model.lora.targets=('q_proj', 'w_gate'): must be a non-empty tuple of q_proj",
                     "config.selection.acc_low=0.9: must be <= config.selection.acc_high=0.1",
                     "config.rl.kl_target=0.1: adapts the KL coefficient, but config.rl.kl_coef=0 turns KL off"):
        assert expected in message, (expected, message)


def test_checks_that_divide_by_a_field_wait_for_it():
    c = config_lib.defaults()
    c.rl.num_minibatches = 0
    with pytest.raises(config_lib.ConfigError) as e:
        config_lib.parse(c)
    assert str(e.value).splitlines()[1:] == ["  config.rl.num_minibatches=0: must be an integer >= 1"]


def test_run_config_is_frozen_and_replace_returns_a_new_one():
    run = sections.RunConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.rl.steps = 3
    changed = run.replace(rl={"steps": 3}, agent={"epo": {"coef": 0.5}}, seed=7)
    assert (changed.rl.steps, changed.agent.epo.coef, changed.seed) == (3, 0.5, 7)
    assert (run.rl.steps, run.agent.epo.coef, run.seed) == (100, 0.0, 0)
    assert changed.rl.num_prompts == run.rl.num_prompts and changed.task is run.task


@pytest.mark.parametrize("check, good, bad, message", [
    (fields.AtLeast(2), [2, 10], [1, 2.0, True, "3"], "must be an integer >= 2"),
    (fields.Between(0.0, 1.0), [0.0, 1, 0.5], [-0.1, 1.01, True, None], "must lie in [0.0, 1.0]"),
    (fields.Between(0.0, 1.0, low_open=True), [1e-9, 1.0], [0.0, 0], "must lie in (0.0, 1.0]"),
    (fields.OneOf(("a", "b")), ["a", "b"], ["c", ""], "unknown; allowed: a, b"),
    (fields.Boolean(), [True, False], [0, 1, "True"], "must be True or False"),
    (fields.Satisfies(lambda v: v.count("{}") == 1, "must contain one '{}'"), ["<{}>"], ["", "{}{}", 3],
     "must contain one '{}'"),
])
def test_bounds(check, good, bad, message):
    assert all(check.error(v) is None for v in good)
    assert all(check.error(v) == message for v in bad)


def test_describe_lists_every_field_with_its_default_bound_and_doc():
    text = config_lib.describe()
    for path, field, value in _fields(sections.RunConfig()):
        assert f"  {path} = {value!r}" in text, path
    assert "  rl.num_generations = 16  (integer >= 1)  # completions per prompt (the group)" in text


def test_configs_import_only_rl4llm_config():
    """Recipes start from configs/default.py (or another recipe) and need nothing of the library but its config
    package (each recipe is parsed and run by tests/test_recipes.py and the tests it names)."""
    root = pathlib.Path(__file__).resolve().parents[1]
    for path in sorted((root / "configs").rglob("*.py")):
        imported = [line.split()[1] for line in path.read_text().splitlines() if line.startswith(("import ", "from "))]
        assert all(m in ("ml_collections", "__future__") or m.startswith("configs") for m in imported
                   if not m.startswith("rl4llm")), (path, imported)
        assert all(m in ("rl4llm", "rl4llm.config") for m in imported if m.startswith("rl4llm")), (path, imported)
