"""A third-party gradlog plugin: the fraction of dead ReLU units, per ReLU module."""

from .plugin import DeadReLU

__all__ = ["DeadReLU"]
