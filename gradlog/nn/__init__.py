"""Neural-network building blocks with PyTorch's names: Module, Parameter, layers, losses,
``functional``, ``init``, ``utils`` and ``parallel`` (DistributedDataParallel)."""

from . import functional, init, modules, parallel, utils  # noqa: F401  (utils: clipping, ...)
from .modules import *  # noqa: F403  (the layers; each module file lists its __all__)
from .modules.module import Module
from .parameter import Buffer, Parameter

__all__ = ["Module", "Parameter", "Buffer", "modules", "functional", "init", "parallel",
           *modules.__all__]
