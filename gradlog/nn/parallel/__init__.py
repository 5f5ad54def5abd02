"""``gradlog.nn.parallel``: ``DistributedDataParallel`` over ``gradlog.distributed`` (MPI).
``distributed.py`` is the module wrapper, ``reducer.py`` the bucketed gradient averaging."""

from .distributed import DistributedDataParallel

__all__ = ["DistributedDataParallel"]
