"""Every test process keeps freed memory for reuse, as the binaries do (rl4llm.train.host_memory)."""

from rl4llm.train import host_memory

host_memory.reuse_freed_memory()
