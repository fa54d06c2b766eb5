"""The two forms of a run's config and the one way between them.

`defaults()` is the editable form (ml_collections): what `configs/*.py` start from and `--config.<field>=value`
overrides. `parse(config) -> RunConfig` turns it into the typed, frozen form (`rl4llm.config.sections`) that the
training stack reads, once per job, and raises `ConfigError` naming every invalid field at once: unknown fields,
each field's bound, then the checks across fields and sections (`rl4llm.config.validation`).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
import typing

import ml_collections
from ml_collections import config_dict

from rl4llm.config import sections
from rl4llm.config import validation


class ConfigError(ValueError):
    """An invalid config; the message lists every offending field."""


_SCALAR_TYPES = (bool, int, float, str)


def _scalar_type(annotation):
    """float for `float`, `Optional[float]`, `float | None`; None for non-scalar annotations."""
    if annotation in _SCALAR_TYPES:
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 and args[0] in _SCALAR_TYPES else None
    return None


def hyperparameter_fields(table: dict, standard_inputs: tuple) -> ml_collections.ConfigDict:
    """One typed `None` placeholder per scalar hyper-parameter of any method in a registry table.

    The editable form of `rl.advantage_kwargs` / `rl.loss_kwargs` / `task.length_shaping_kwargs`: every
    hyper-parameter can be set from the command line (`--config.rl.loss_kwargs.clip_high=0.28`); `None` means
    "the method's own default", and `parse` keeps only the fields that are set.
    """
    fields = {}
    for fn in table.values():
        fn = fn.func if isinstance(fn, functools.partial) else fn
        hints = typing.get_type_hints(fn)
        for name in inspect.signature(fn).parameters:
            field_type = _scalar_type(hints.get(name))
            if name not in standard_inputs and field_type is not None:
                fields.setdefault(name, config_dict.placeholder(field_type))
    return ml_collections.ConfigDict(dict(sorted(fields.items())))


def _editable(node) -> ml_collections.ConfigDict:
    out = ml_collections.ConfigDict()
    for field in dataclasses.fields(node):
        value = getattr(node, field.name)
        if "placeholders" in field.metadata:
            out[field.name] = hyperparameter_fields(*field.metadata["placeholders"])
        elif dataclasses.is_dataclass(value):
            out[field.name] = _editable(value)
        elif isinstance(value, dict):
            out[field.name] = ml_collections.ConfigDict(value)
        else:
            out[field.name] = value
    return out


def defaults() -> ml_collections.ConfigDict:
    """The default run config in its editable form: every field of `sections.RunConfig` at its default."""
    return _editable(sections.RunConfig())


def _typed(cls, node, path: str, errors: list[str]):
    """`cls` built from the ConfigDict `node`; unknown fields and out-of-bound values are added to `errors`."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name in sorted(set(node.keys()) - set(fields)):
        errors.append(f"config.{path}{name}: unknown field of config.{path.rstrip('.') or '<root>'}; known: "
                      f"{', '.join(fields)}")
    values = {}
    for name, field in fields.items():
        if name not in node:
            continue  # the field's default
        value = node[name]
        if "placeholders" in field.metadata:
            value = {k: v for k, v in value.to_dict().items() if v is not None}
        elif isinstance(field.default_factory, type) and dataclasses.is_dataclass(field.default_factory):
            value = _typed(field.default_factory, value, f"{path}{name}.", errors)
        elif isinstance(value, ml_collections.ConfigDict):
            value = value.to_dict()
        elif isinstance(value, list):
            value = tuple(value)
        check = field.metadata.get("check")
        requirement = None if check is None else check.error(value)
        if requirement:
            errors.append(f"config.{path}{name}={value!r}: {requirement}")
        values[name] = value
    return cls(**values)


def parse(config: ml_collections.ConfigDict) -> sections.RunConfig:
    """The typed config of `config` (its editable form); `ConfigError` listing every invalid field."""
    errors = []
    run = _typed(sections.RunConfig, config, "", errors)
    # the checks across fields that divide by a section's fields wait for them to be within their bounds
    out_of_bounds = [e.removeprefix("config.").split("=")[0] for e in errors if "=" in e.split(": ")[0]]
    invalid = frozenset(path.split(".")[0] for path in out_of_bounds)
    errors += validation.errors(run, invalid)
    if errors:
        raise ConfigError("Invalid config:\n  " + "\n  ".join(errors))
    return run


def describe() -> str:
    """Every field of a run config: path, default, bound and doc, one per line (`python -m rl4llm.config`)."""
    lines = []

    def walk(node, path):
        for field in dataclasses.fields(node):
            value = getattr(node, field.name)
            if dataclasses.is_dataclass(value):
                lines.append(f"\n{path}{field.name}: {field.metadata['doc']}")
                walk(value, f"{path}{field.name}.")
                continue
            check = field.metadata.get("check")
            bound = "" if check is None else f"  ({check})"
            lines.append(f"  {path}{field.name} = {value!r}{bound}  # {field.metadata['doc']}")

    walk(sections.RunConfig(), "")
    return "\n".join(lines).lstrip("\n")

