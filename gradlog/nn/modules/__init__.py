"""Layers and the Module base class, one family per file (as in PyTorch)."""

from .module import Module

__all__ = ["Module"]
