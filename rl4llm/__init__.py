"""rl4llm: JAX-native reinforcement-learning post-training of language models."""
