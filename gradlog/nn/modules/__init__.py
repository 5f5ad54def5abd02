"""Layers and the Module base class, one family per file (as in PyTorch)."""

from .activation import *  # noqa: F403
from .activation import __all__ as _activation
from .batchnorm import *  # noqa: F403
from .batchnorm import __all__ as _batchnorm
from .container import *  # noqa: F403
from .container import __all__ as _container
from .conv import *  # noqa: F403
from .conv import __all__ as _conv
from .dropout import *  # noqa: F403
from .dropout import __all__ as _dropout
from .flatten import *  # noqa: F403
from .flatten import __all__ as _flatten
from .linear import *  # noqa: F403
from .linear import __all__ as _linear
from .loss import *  # noqa: F403
from .loss import __all__ as _loss
from .module import Module
from .normalization import *  # noqa: F403
from .normalization import __all__ as _normalization
from .pooling import *  # noqa: F403
from .pooling import __all__ as _pooling
from .sparse import *  # noqa: F403
from .sparse import __all__ as _sparse

__all__ = ["Module", *_container, *_linear, *_conv, *_pooling, *_batchnorm, *_normalization,
           *_dropout, *_sparse, *_flatten, *_activation, *_loss]
