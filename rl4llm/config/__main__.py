"""`python -m rl4llm.config`: every field of a run config with its default, bound and doc."""

from rl4llm.config import describe

print(describe())
