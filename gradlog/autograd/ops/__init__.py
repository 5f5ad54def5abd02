"""The differentiable operations, one file per family.

Each family module lists the Tensor methods it provides in ``TENSOR_METHODS`` (PyTorch's
names); they are installed on :class:`Tensor` here, in one place.
"""

from ..tensor import Tensor
from . import (
    activation,
    arithmetic,
    compare,
    conversion,
    cumulative,
    indexing,
    inplace,
    inplace_view,
    join,
    linalg,
    reduction,
    shape,
    statistics,
    unary,
)

FAMILIES = (arithmetic, unary, activation, reduction, statistics, cumulative, shape, join,
            indexing, linalg, compare, conversion, inplace, inplace_view)

for _family in FAMILIES:
    for _name, _method in _family.TENSOR_METHODS.items():
        setattr(Tensor, _name, _method)
