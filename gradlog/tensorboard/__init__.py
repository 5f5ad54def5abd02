"""TensorBoard logging with the API of ``torch.utils.tensorboard``: ``SummaryWriter`` and
``FileWriter``.

Layers (each usable alone): :mod:`.record` frames records, :mod:`.event_file` owns one event
file and its flush policy, :mod:`.lifecycle` flushes open files at exit and on signals,
:mod:`.file_writer` is PyTorch's ``FileWriter`` over an event file, and the pure builders turn
values into protos: :mod:`.summary` (scalars, text, PR curves, custom scalars),
:mod:`.histogram`, :mod:`.image`, :mod:`.boxes`, :mod:`.video`, :mod:`.audio`, :mod:`.mesh`,
:mod:`.tensor`, :mod:`.hparams`, and the ``GraphDef`` builders :mod:`.graph` and
:mod:`.onnx_graph`; :mod:`.writer` puts them together. This package depends only on numpy,
tensorboard, protobuf, google-crc32c and (lazily) Pillow; torch only when given a torch module.
"""

from .file_writer import FileWriter
from .writer import SummaryWriter

__all__ = ["SummaryWriter", "FileWriter"]
