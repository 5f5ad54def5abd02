"""``gradlog.distributed``: ``torch.distributed``'s names over MPI (``mpi4py`` on the
``mpich`` wheel: ``pip install 'gradlog[mpi]'``), for data-parallel training of gradlog models
under ``mpiexec -n N`` (or ``gradlog train --nproc N``).

``process_group.py`` talks to MPI (non-blocking collectives on numpy arrays); ``collectives.py``
is the functional API on tensors; ``failure.py`` makes a failing rank end the job.
``DistributedDataParallel`` is in ``gradlog.nn.parallel`` and ``DistributedSampler`` in
``gradlog.data``, next to what they wrap.
"""

from .collectives import (
    GroupMember,
    all_gather,
    all_reduce,
    barrier,
    broadcast,
    destroy_process_group,
    get_backend,
    get_rank,
    get_world_size,
    init_process_group,
    is_available,
    is_initialized,
    is_mpi_available,
)
from .process_group import ProcessGroupMPI, ReduceOp, Work

__all__ = ["init_process_group", "destroy_process_group", "is_initialized", "is_available",
           "is_mpi_available", "get_rank", "get_world_size", "get_backend", "all_reduce",
           "broadcast", "all_gather", "barrier", "ReduceOp", "Work", "ProcessGroupMPI",
           "GroupMember"]
