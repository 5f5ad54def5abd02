"""Neural-network building blocks with PyTorch's names: Module, Parameter, layers, losses,
``functional``, ``init`` and ``utils``."""

from . import functional, init, modules, utils  # noqa: F401  (utils: clipping, ...)
from .modules import *  # noqa: F403  (the layers; each module file lists its __all__)
from .modules.module import Module
from .parameter import Buffer, Parameter

__all__ = ["Module", "Parameter", "Buffer", "modules", "functional", "init",
           *modules.__all__]
