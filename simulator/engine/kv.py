"""Paged KV accounting of one engine: blocks of `block_size` tokens, how many are in use, and
whether a request can ever fit. The running batch says which request holds which blocks; this
says how many there are (a dynamic policy may resize it: Flying Serving's TP groups)."""
from __future__ import annotations


class KVBlocks:
    """`num_blocks` KV blocks of `block_size` tokens; `used` of them held by running requests."""

    __slots__ = ("num_blocks", "block_size", "used")

    def __init__(self, capacity_tokens: int, block_size: int):
        self.block_size = int(block_size)
        self.num_blocks = int(capacity_tokens // self.block_size)
        self.used = 0

    @property
    def free(self) -> int:
        return self.num_blocks - self.used

    @property
    def capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size

    @property
    def used_tokens(self) -> int:
        return self.used * self.block_size

    def resize(self, num_blocks: int) -> None:
        """A new number of blocks (a policy lending this engine more or less memory)."""
        self.num_blocks = int(num_blocks)
