"""Command-line overrides of a config file (`--config.rl.learning_rate=1e-5`), checked before absl parses them.

ml_collections raises a bare `AttributeError: "'lr'"` (with a traceback) for an override naming no field. The
binaries call `exit_on_unknown_fields(argv, default_config)` first: every unknown field is named with the closest
existing ones ("unknown field config.rl.lr; did you mean config.rl.learning_rate?") and the process exits 2, the
usage-error status of absl and argparse.
"""

from __future__ import annotations

import difflib
import importlib.util
import re
import sys

import ml_collections

_OVERRIDE = re.compile(r"^--?(?:no)?config\.([^=]+)")
_CONFIG_FILE = re.compile(r"^--?config(?:=(.*))?$")


def config_spec(argv: list[str], default: str) -> str:
    """The `--config` value of `argv` (`path` or `path:argument`, either `--config=x` or `--config x`), else
    `default`."""
    for i, arg in enumerate(argv):
        match = _CONFIG_FILE.match(arg)
        if match:
            return match.group(1) if match.group(1) is not None else argv[i + 1]
    return default


def load_config(spec: str) -> ml_collections.ConfigDict:
    """`get_config()` (or `get_config(argument)` for `path:argument`) of a config file, as ml_collections'
    `DEFINE_config_file` loads it."""
    path, _, argument = spec.partition(":")
    module_spec = importlib.util.spec_from_file_location("_rl4llm_config_file", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.get_config(argument) if argument else module.get_config()


def field_paths(config: ml_collections.ConfigDict, prefix: str = "") -> list[str]:
    """Every dotted field path of `config`, sections included (`rl`, `rl.learning_rate`, ...)."""
    paths = []
    for name, value in config.items():
        paths.append(prefix + name)
        if isinstance(value, ml_collections.ConfigDict):
            paths += field_paths(value, prefix + name + ".")
    return paths


def suggestions(path: str, known: list[str], n: int = 3) -> list[str]:
    """Up to `n` fields of `known` that `path` probably meant: in its own section, those whose words' initials
    spell its last name (`lr` -> `learning_rate`), then those whose last name is close to it (difflib); else the
    closest full paths."""
    section, _, name = path.rpartition(".")
    siblings = [k for k in known if k.rpartition(".")[0] == section]
    by_initials = [k for k in siblings if "".join(w[:1] for w in k.rpartition(".")[2].split("_")) == name]
    leaf_of = {k.rpartition(".")[2]: k for k in siblings}
    by_spelling = [leaf_of[leaf] for leaf in difflib.get_close_matches(name, list(leaf_of), n=n, cutoff=0.6)]
    close = list(dict.fromkeys(by_initials + by_spelling))[:n]
    return close or difflib.get_close_matches(path, known, n=n, cutoff=0.6)


def unknown_field_errors(config: ml_collections.ConfigDict, argv: list[str]) -> list[str]:
    """One message per `--config.<path>` override of `argv` whose path is no field of `config`, with its likely
    meanings (`suggestions`)."""
    known = field_paths(config)
    errors = []
    for arg in argv:
        match = _OVERRIDE.match(arg)
        if match is None or match.group(1) in known:
            continue
        path = match.group(1)
        message = f"unknown field config.{path}"
        close = suggestions(path, known)
        if close:
            message += "; did you mean " + " or ".join(f"config.{c}" for c in close) + "?"
        errors.append(message)
    return errors


def exit_on_unknown_fields(argv: list[str], default_config: str) -> None:
    """Prints every unknown `--config.` field of `argv` (the config file's, or `default_config`'s) and exits 2."""
    errors = unknown_field_errors(load_config(config_spec(argv, default_config)), argv)
    if errors:
        print("\n".join(errors), file=sys.stderr)
        sys.exit(2)
