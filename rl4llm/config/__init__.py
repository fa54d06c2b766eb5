"""A run's config: the `agent` section's defaults (`agent`), and validation before anything is built (`validate`):
every error names its field, all of a config's errors are reported at once. `configs/*.py` import only this."""

from rl4llm.config.validation import ConfigError, hyperparameter_fields, validate  # noqa: F401
