"""``add_onnx_graph``: an ONNX model file's graph as the ``GraphDef`` PyTorch writes for it,
read without the onnx package.

An ONNX file is a serialized ``onnx.ModelProto``. The messages and fields needed (graph, nodes,
attributes, inputs and outputs with their types) are declared here by their numbers in the
public ``onnx.proto`` and built with protobuf's descriptor API in a private pool, so no onnx
module is imported and no other proto definition is touched; fields not declared are skipped.

PyTorch's conversion: each graph input and output becomes a ``Variable`` node with ``dtype``
(ONNX's element type number) and ``shape``; each ONNX node becomes a node named after its first
output, with its op type, its inputs, and its attributes in one ``parameters`` string.
"""

from __future__ import annotations

import functools
import os

from tensorboard.compat.proto.attr_value_pb2 import AttrValue
from tensorboard.compat.proto.graph_pb2 import GraphDef
from tensorboard.compat.proto.node_def_pb2 import NodeDef
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
from tensorboard.compat.proto.versions_pb2 import VersionDef

__all__ = ["load_onnx_graph", "onnx_graph"]

_PACKAGE = "gradlog_onnx_subset"
# message -> [(field name, number, type, label, message type)], numbers from onnx.proto
_O, _R = "optional", "repeated"
_SCHEMA = {
    "ModelProto": [("ir_version", 1, "int64", _O, None), ("graph", 7, "message", _O, "GraphProto")],
    "GraphProto": [("node", 1, "message", _R, "NodeProto"), ("name", 2, "string", _O, None),
                   ("initializer", 5, "message", _R, "TensorProto"),
                   ("doc_string", 10, "string", _O, None),
                   ("input", 11, "message", _R, "ValueInfoProto"),
                   ("output", 12, "message", _R, "ValueInfoProto"),
                   ("value_info", 13, "message", _R, "ValueInfoProto")],
    "NodeProto": [("input", 1, "string", _R, None), ("output", 2, "string", _R, None),
                  ("name", 3, "string", _O, None), ("op_type", 4, "string", _O, None),
                  ("attribute", 5, "message", _R, "AttributeProto"),
                  ("doc_string", 6, "string", _O, None), ("domain", 7, "string", _O, None)],
    "AttributeProto": [("name", 1, "string", _O, None), ("f", 2, "float", _O, None),
                       ("i", 3, "int64", _O, None), ("s", 4, "bytes", _O, None),
                       ("t", 5, "message", _O, "TensorProto"),
                       ("g", 6, "message", _O, "GraphProto"), ("floats", 7, "float", _R, None),
                       ("ints", 8, "int64", _R, None), ("strings", 9, "bytes", _R, None),
                       ("tensors", 10, "message", _R, "TensorProto"),
                       ("graphs", 11, "message", _R, "GraphProto"),
                       ("doc_string", 13, "string", _O, None), ("type", 20, "int32", _O, None),
                       ("ref_attr_name", 21, "string", _O, None)],
    "TensorProto": [("dims", 1, "int64", _R, None), ("data_type", 2, "int32", _O, None),
                    ("float_data", 4, "float", _R, None), ("int32_data", 5, "int32", _R, None),
                    ("string_data", 6, "bytes", _R, None), ("int64_data", 7, "int64", _R, None),
                    ("name", 8, "string", _O, None), ("raw_data", 9, "bytes", _O, None),
                    ("double_data", 10, "double", _R, None),
                    ("uint64_data", 11, "uint64", _R, None),
                    ("doc_string", 12, "string", _O, None)],
    "ValueInfoProto": [("name", 1, "string", _O, None),
                       ("type", 2, "message", _O, "TypeProto"),
                       ("doc_string", 3, "string", _O, None)],
    "TypeProto": [("tensor_type", 1, "message", _O, "TypeProtoTensor")],
    "TypeProtoTensor": [("elem_type", 1, "int32", _O, None),
                        ("shape", 2, "message", _O, "TensorShapeProto")],
    "TensorShapeProto": [("dim", 1, "message", _R, "Dimension")],
    "Dimension": [("dim_value", 1, "int64", _O, None), ("dim_param", 2, "string", _O, None)],
}


@functools.cache
def _model_class():
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    field = descriptor_pb2.FieldDescriptorProto
    types = {"int64": field.TYPE_INT64, "int32": field.TYPE_INT32, "uint64": field.TYPE_UINT64,
             "float": field.TYPE_FLOAT, "double": field.TYPE_DOUBLE, "string": field.TYPE_STRING,
             "bytes": field.TYPE_BYTES, "message": field.TYPE_MESSAGE}
    labels = {_O: field.LABEL_OPTIONAL, _R: field.LABEL_REPEATED}
    file = descriptor_pb2.FileDescriptorProto(name=f"{_PACKAGE}.proto", package=_PACKAGE,
                                              syntax="proto2")
    for message, fields in _SCHEMA.items():
        proto = file.message_type.add(name=message)
        for name, number, kind, label, type_name in fields:
            entry = proto.field.add(name=name, number=number, type=types[kind],
                                    label=labels[label])
            if type_name:
                entry.type_name = f".{_PACKAGE}.{type_name}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.ModelProto"))


def _variable(value_info) -> NodeDef:
    tensor_type = value_info.type.tensor_type
    shape = TensorShapeProto(dim=[TensorShapeProto.Dim(size=d.dim_value)
                                  for d in tensor_type.shape.dim])
    return NodeDef(name=value_info.name, op="Variable",
                   attr={"dtype": AttrValue(type=tensor_type.elem_type),
                         "shape": AttrValue(shape=shape)})


def _parameters(node) -> bytes:
    # PyTorch's string: per attribute, the values of its set fields joined by " = ".
    return ", ".join(" = ".join(str(value) for _, value in attribute.ListFields())
                     for attribute in node.attribute).encode("utf-8")


def onnx_graph(model_bytes: bytes) -> GraphDef:
    """The ``GraphDef`` of a serialized ONNX ``ModelProto``."""
    from google.protobuf.message import DecodeError

    model = _model_class()()
    try:
        model.ParseFromString(model_bytes)
    except DecodeError as error:
        raise ValueError(f"not an ONNX model: {error}") from error
    graph = model.graph
    nodes = [_variable(value) for value in list(graph.input) + list(graph.output)]
    for node in graph.node:
        nodes.append(NodeDef(name=node.output[0] if node.output else node.name,
                             op=node.op_type, input=list(node.input),
                             attr={"parameters": AttrValue(s=_parameters(node))}))
    return GraphDef(node=nodes, versions=VersionDef(producer=22))


def load_onnx_graph(path) -> GraphDef:
    """The ``GraphDef`` of the ONNX model file at ``path``."""
    with open(os.fspath(path), "rb") as file:
        return onnx_graph(file.read())
