"""TensorBoard logging with the API of ``torch.utils.tensorboard``: ``SummaryWriter``.

Layers (each usable alone): :mod:`.record` frames records, :mod:`.event_file` owns one event
file and its flush policy, :mod:`.lifecycle` flushes open files at exit and on signals, and the
pure builders :mod:`.summary`, :mod:`.histogram`, :mod:`.image`, :mod:`.hparams` turn values into
``Summary`` protos; :mod:`.writer` puts them together. This package depends only on numpy,
tensorboard, protobuf, google-crc32c and (lazily) Pillow.
"""

from .writer import SummaryWriter

__all__ = ["SummaryWriter"]
