"""rl4llm: JAX-native reinforcement-learning post-training of language models."""
import setuptools

setuptools.setup(
    name="rl4llm",
    version="0.1.0",
    description="JAX-native RL post-training of language models: pure kernels, one jitted step, Orbax checkpoints.",
    packages=setuptools.find_packages(include=["rl4llm", "rl4llm.*"]),
    python_requires=">=3.10",
    install_requires=[
        "jax>=0.7",
        "flax>=0.11",
        "optax>=0.2.5",
        "orbax-checkpoint>=0.11",
        "chex>=0.1.90",
        "tensorflow-datasets>=4.9.9",
        "array_record>=0.8",
        "importlib_resources",
        "sentencepiece>=0.2",
        "ml-collections>=1.0",
        "absl-py>=2.0",
        "tensorboardX>=2.6",
        "numpy>=1.26",
    ],
    extras_require={
        "test": ["pytest>=8", "pytest-xdist>=3", "hypothesis>=6"],
        "notebooks": ["jupyter", "nbclient", "nbformat", "ipykernel", "matplotlib"],
    },
)
