"""``add_tensor``'s encoding: a whole array as a ``TensorProto`` of the ``tensor`` plugin.

No dashboard draws these; they are read back with TensorBoard's loaders (or any event reader)
as the array that was logged, with its dtype and shape. The values go into ``tensor_content``
(little-endian bytes), which TensorBoard's ``make_ndarray`` decodes for every dtype, so float16
and uint8 come back as they were (PyTorch's typed value lists turn float16 into float32 bit
patterns and lose uint8 values). Strings become ``DT_STRING``.
"""

from __future__ import annotations

import numpy as np
from tensorboard.compat.proto import types_pb2
from tensorboard.compat.proto.summary_pb2 import DATA_CLASS_TENSOR, Summary, SummaryMetadata
from tensorboard.compat.proto.tensor_pb2 import TensorProto
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto

__all__ = ["tensor_proto", "tensor_summary"]

_LIMIT = 1 << 31  # a protocol buffer message cannot be larger
_DTYPES = {
    "float16": types_pb2.DT_HALF, "float32": types_pb2.DT_FLOAT,
    "float64": types_pb2.DT_DOUBLE, "int8": types_pb2.DT_INT8, "int16": types_pb2.DT_INT16,
    "int32": types_pb2.DT_INT32, "int64": types_pb2.DT_INT64, "uint8": types_pb2.DT_UINT8,
    "uint16": types_pb2.DT_UINT16, "uint32": types_pb2.DT_UINT32,
    "uint64": types_pb2.DT_UINT64, "bool": types_pb2.DT_BOOL,
    "complex64": types_pb2.DT_COMPLEX64, "complex128": types_pb2.DT_COMPLEX128,
}


def tensor_proto(array: np.ndarray) -> TensorProto:
    """``array`` (any numeric, bool or string dtype) as a ``TensorProto``."""
    array = np.asarray(array)
    shape = TensorShapeProto(dim=[TensorShapeProto.Dim(size=n) for n in array.shape])
    if array.dtype.kind in "USO":
        values = [v if isinstance(v, bytes) else str(v).encode("utf-8") for v in array.ravel()]
        return TensorProto(dtype=types_pb2.DT_STRING, tensor_shape=shape, string_val=values)
    dtype = _DTYPES.get(array.dtype.name)
    if dtype is None:
        raise ValueError(f"add_tensor: unsupported dtype {array.dtype}")
    if array.nbytes >= _LIMIT:
        raise ValueError(f"add_tensor: the tensor has {array.nbytes} bytes, more than a "
                         f"protocol buffer can hold (2 GiB)")
    little = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
    return TensorProto(dtype=dtype, tensor_shape=shape, tensor_content=little.tobytes())


def tensor_summary(tag: str, array: np.ndarray) -> Summary:
    """The ``tensor`` plugin's summary of ``array`` (``data_class`` set, so both loaders list
    it; PyTorch leaves it unset)."""
    metadata = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="tensor"),
                               data_class=DATA_CLASS_TENSOR)
    return Summary(value=[Summary.Value(tag=tag, metadata=metadata,
                                        tensor=tensor_proto(array))])
