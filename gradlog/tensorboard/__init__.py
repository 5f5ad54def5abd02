"""TensorBoard logging with the API of ``torch.utils.tensorboard``: ``SummaryWriter`` and
``FileWriter``.

Layers, each calling only the one below it (``write(bytes)``, ``flush``, ``sync``, ``close``):
:mod:`.writer` (``SummaryWriter``) over :mod:`.file_writer` (PyTorch's ``FileWriter``, one run
directory) over :mod:`.queued` (the background thread, a wrapping layer; absent with
``background=False``) over :mod:`.event_file` (one event file: naming, queue, flush policy),
which frames records (:mod:`.record`) into a :mod:`gradlog.storage` stream (a local file, an
appendable file or an object store's segments). Beside them, :mod:`.lifecycle` flushes open
files at exit, on signals and while idle. The pure builders turn values into protos:
:mod:`.summary` (scalars, text, PR curves, custom scalars), :mod:`.histogram`, :mod:`.image`,
:mod:`.boxes`, :mod:`.video`, :mod:`.audio`, :mod:`.mesh`, :mod:`.tensor`, :mod:`.hparams`, and
the ``GraphDef`` builders :mod:`.graph` and :mod:`.onnx_graph`; :mod:`.writer` puts them
together. This package depends on :mod:`gradlog.storage` and otherwise only on numpy,
tensorboard, protobuf, google-crc32c and (lazily) Pillow, never on torch: ``add_graph`` gets
its tracer from the model's engine (:mod:`gradlog.utils.graph_tracer`).
"""

from .file_writer import FileWriter
from .writer import SummaryWriter

__all__ = ["SummaryWriter", "FileWriter"]
