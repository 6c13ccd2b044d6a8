"""Random streams by name: every random draw of a run comes from a stream named for what it
draws, derived from the run seed and the name with numpy's ``SeedSequence`` (entropy: the
seed; spawn key: the name's SHA-256 digest), never by arithmetic on the seed. Runs at
different seeds therefore share no stream, replicates are independent, and a result does
not depend on which worker process drew it.

    streams = Streams(seed)
    rng = streams.numpy("held_out")              # a numpy Generator
    gen = streams.torch("init", device="cpu")    # a torch Generator
    seed = streams.seed("sampler")               # an int, for a library that takes one
    per_domain = streams.child("ferry")          # names under "ferry/"
    with streams.torch_default("model init"):    # torch's global generator, restored after
        model = Model(...)

A **fixed** stream (``Streams(seed, fixed=True)`` or ``streams.fixed(name)``) ignores the run
seed: draws meant to be the same at every seed (a benchmark's instances, a shared test
set) declare themselves so. Every name drawn is recorded in ``used`` (name -> "run" or
"fixed"), which the runner writes to ``results.json``.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
from collections.abc import Iterator

import numpy as np

FIXED_ENTROPY = 2026  # the entropy of fixed streams (the same at every run seed)


def _spawn_key(name: str) -> tuple[int, ...]:
    digest = hashlib.sha256(name.encode()).digest()
    return tuple(int.from_bytes(digest[i:i + 4], "little") for i in range(0, 32, 4))


class Streams:
    """Independent random streams of one seed, by name (see the module docstring)."""

    def __init__(self, seed: int, fixed: bool = False, prefix: str = "",
                 used: dict[str, str] | None = None):
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"a run seed is a non-negative integer, not {seed!r}")
        self.entropy = FIXED_ENTROPY if fixed else int(seed)
        self.is_fixed, self.prefix = fixed, prefix
        self.used = {} if used is None else used

    def sequence(self, name: str) -> np.random.SeedSequence:
        full = self.prefix + name
        self.used[full] = "fixed" if self.is_fixed else "run"
        return np.random.SeedSequence(self.entropy, spawn_key=_spawn_key(full))

    def numpy(self, name: str) -> np.random.Generator:
        return np.random.default_rng(self.sequence(name))

    def seed(self, name: str) -> int:
        """A 63-bit integer of the stream, for code that takes a seed."""
        return int(self.sequence(name).generate_state(1, np.uint64)[0] >> np.uint64(1))

    def python(self, name: str) -> random.Random:
        return random.Random(self.seed(name))

    def torch(self, name: str, device: str = "cpu"):
        import torch

        return torch.Generator(device=device).manual_seed(self.seed(name))

    @contextlib.contextmanager
    def torch_default(self, name: str, devices: tuple = ()) -> Iterator[None]:
        """torch's global generators (the CPU's and those of the CUDA ``devices``) seeded
        from the stream inside the block and restored after it: for code that draws from
        them with no way to pass a generator (a module's parameter initialisation)."""
        import torch

        with torch.random.fork_rng(devices=list(devices)):
            torch.manual_seed(self.seed(name))
            yield

    def child(self, name: str) -> Streams:
        """The streams under ``<name>/`` (per domain, per arm, per replicate)."""
        return Streams(0, self.is_fixed, f"{self.prefix}{name}/", self.used)._with(self.entropy)

    def fixed(self, name: str) -> Streams:
        """The fixed streams under ``<name>/``: the same at every run seed."""
        return Streams(0, True, f"{self.prefix}{name}/", self.used)

    def _with(self, entropy: int) -> Streams:
        self.entropy = entropy
        return self
