"""Random number generation: one default generator for all random ops, and ``Generator``.

Every random function takes ``generator=``; without it, the default generator seeded by
``gl.manual_seed`` is used, so one seed makes a whole run reproducible.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Generator", "manual_seed", "seed", "initial_seed", "default_generator",
           "get_rng_state", "set_rng_state", "default_generator_as"]

_STATE_WORDS = 6  # state (2 x 64 bit), increment (2 x 64 bit), has_uint32, uinteger


class Generator:
    """A seedable random stream (PyTorch's ``torch.Generator``), backed by numpy's PCG64.

    ``gl.Generator().manual_seed(0)`` returns the generator, so it can be built inline.
    """

    def __init__(self, device: str = "cpu") -> None:
        self._seed = 67280421310721  # PyTorch's default seed
        self._rng = np.random.Generator(np.random.PCG64(self._seed))

    @property
    def device(self) -> str:
        return "cpu"

    def manual_seed(self, seed: int) -> Generator:
        seed = int(seed)
        self._seed = seed
        self._rng = np.random.Generator(np.random.PCG64(seed & 0xFFFF_FFFF_FFFF_FFFF))
        return self

    def seed(self) -> int:
        """Seed from the OS's entropy and return the seed used."""
        s = int(np.random.SeedSequence().entropy) & 0xFFFF_FFFF_FFFF_FFFF
        self.manual_seed(s)
        return s

    def initial_seed(self) -> int:
        return self._seed

    def get_state(self):
        """The full state as a uint8 tensor (store it in a checkpoint; restore with set_state)."""
        from .tensor import wrap
        st = self._rng.bit_generator.state
        mask = (1 << 64) - 1
        words = np.array([st["state"]["state"] & mask, st["state"]["state"] >> 64,
                          st["state"]["inc"] & mask, st["state"]["inc"] >> 64,
                          st["has_uint32"], st["uinteger"]], dtype=np.uint64)
        return wrap(words.view(np.uint8).copy())

    def set_state(self, new_state) -> Generator:
        arr = np.asarray(new_state, dtype=np.uint8)
        if arr.shape != (_STATE_WORDS * 8,):
            raise RuntimeError(f"Generator.set_state expects a uint8 tensor of "
                               f"{_STATE_WORDS * 8} bytes as returned by get_state(), got "
                               f"shape {tuple(arr.shape)}")
        w = [int(x) for x in arr.view(np.uint64)]
        self._rng.bit_generator.state = {
            "bit_generator": "PCG64",
            "state": {"state": w[0] | (w[1] << 64), "inc": w[2] | (w[3] << 64)},
            "has_uint32": w[4], "uinteger": w[5],
        }
        return self

    @property
    def numpy_rng(self) -> np.random.Generator:
        """The numpy generator behind this one (for code that draws arrays directly)."""
        return self._rng


default_generator = Generator()


def manual_seed(seed: int) -> Generator:
    """Seed the default generator; returns it."""
    return default_generator.manual_seed(seed)


def seed() -> int:
    return default_generator.seed()


def initial_seed() -> int:
    return default_generator.initial_seed()


def get_rng_state():
    return default_generator.get_state()


def set_rng_state(new_state) -> None:
    default_generator.set_state(new_state)


class default_generator_as:
    """Within the block, the global random functions draw from ``generator`` itself (both
    advance one stream); afterwards the default generator continues exactly where it was.
    Plugins' internal passes use this so they never consume the training run's randomness."""

    def __init__(self, generator: Generator) -> None:
        if not isinstance(generator, Generator):
            raise TypeError(f"expected a gradlog.Generator, got {type(generator).__name__}")
        self.generator = generator

    def __enter__(self) -> Generator:
        self._saved = default_generator._rng
        default_generator._rng = self.generator._rng
        return self.generator

    def __exit__(self, *exc_info: object) -> None:
        default_generator._rng = self._saved


def rng(generator: Generator | None) -> np.random.Generator:
    """The numpy generator to draw from: ``generator``'s, or the default one."""
    if generator is None:
        return default_generator._rng
    if not isinstance(generator, Generator):
        raise TypeError(f"generator must be a gradlog.Generator, got {type(generator).__name__}")
    return generator._rng
