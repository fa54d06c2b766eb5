"""A run's config. Its fields, defaults, docs and bounds: `sections` (`python -m rl4llm.config` prints them).
`defaults()` is the editable form (ml_collections) that `configs/*.py` and `--config.<field>=` change;
`parse(config) -> RunConfig` checks it (every error named at once, `ConfigError`) and gives the typed, frozen form
the training stack reads. `configs/*.py` import only this package."""

from rl4llm.config.parse import ConfigError, defaults, describe, parse  # noqa: F401
from rl4llm.config.sections import RunConfig  # noqa: F401
