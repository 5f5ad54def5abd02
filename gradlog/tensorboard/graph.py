"""``add_graph``'s ``GraphDef``: the model's graph from one forward pass, for the Graphs dashboard.

A gradlog module (anything with PyTorch's ``named_modules``/``named_parameters``/forward-hook
API whose tensors have ``grad_fn``) is run once, in eval mode, on ``input_to_model``; the
autograd graph of that pass gives the op nodes (a node per ``grad_fn``, named after its
operation, ``next_functions`` giving the edges), forward hooks on every module give the scopes
``Model/Child[name]/...`` (PyTorch's naming: class, then the attribute in brackets), so the
dashboard shows the layers by name, collapsible. Inputs are ``input/input.N``, outputs
``output/output.N``, parameters ``<scope>/<name>``. Shapes are on the edges where the pass shows
them: every input, parameter and module output and the tensors an op saved for backward.

Which tracer a model gets is its engine's choice, not this module's: ``graph`` calls the
tracer installed in :mod:`gradlog.utils.graph_tracer` (``gradlog.engines`` installs one that
asks the model's engine: gradlog's walks its autograd graph with ``autograd_graph_def`` below,
PyTorch's runs PyTorch's own tracer). Without one installed, ``autograd_graph_def`` traces.
"""

from __future__ import annotations

import re

from tensorboard.compat.proto.attr_value_pb2 import AttrValue
from tensorboard.compat.proto.graph_pb2 import GraphDef
from tensorboard.compat.proto.node_def_pb2 import NodeDef
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
from tensorboard.compat.proto.versions_pb2 import VersionDef

from ..utils.graph_tracer import graph_tracer
from .convert import to_numpy

__all__ = ["graph", "autograd_graph_def", "run_metadata"]

_PRODUCER = 22  # the GraphDef version PyTorch writes
_BACKWARD_SUFFIX = re.compile(r"Backward\d*$")


def run_metadata():
    """The ``RunMetadata`` PyTorch logs with a graph: one CPU device, no step statistics."""
    from tensorboard.compat.proto.config_pb2 import RunMetadata
    from tensorboard.compat.proto.step_stats_pb2 import DeviceStepStats, StepStats

    return RunMetadata(step_stats=StepStats(dev_stats=[DeviceStepStats(device="/device:CPU:0")]))


def _is_tensor(value) -> bool:
    return hasattr(value, "grad_fn") and hasattr(value, "shape") and hasattr(value, "detach")


def _tensors(value) -> list:
    """The tensors in a (nested) tuple, list or dict of values, in order."""
    found, stack = [], [value]
    while stack:
        item = stack.pop()
        if _is_tensor(item):
            found.append(item)
        elif isinstance(item, (tuple, list)):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
    return found


def _edge(tensor):
    """``(node, output_nr)`` of a non-leaf tensor, else None. (A tensor without PyTorch's
    ``output_nr`` is taken for its node's first output.)"""
    node = tensor.grad_fn
    return None if node is None else (node, getattr(tensor, "output_nr", 0))


def _shape_attr(shapes: list) -> dict:
    protos = [TensorShapeProto(dim=[TensorShapeProto.Dim(size=int(n)) for n in shape])
              for shape in shapes]
    return {"_output_shapes": AttrValue(list=AttrValue.ListValue(shape=protos))}


class _Pass:
    """One forward pass with a forward hook on every module: each call's name, the nodes of
    its inputs (where its own nodes stop) and of its outputs (where they start)."""

    def __init__(self, model, args: tuple) -> None:
        self.calls: list[tuple[str, set, list]] = []
        self.shapes: dict[tuple[int, int], tuple] = {}
        modules = list(model.named_modules())
        handles = [module.register_forward_hook(self._hook(name), with_kwargs=True)
                   for name, module in modules]
        modes = [(module, module.training) for _, module in modules]
        model.train(False)  # as PyTorch: traced in eval mode, restored afterwards
        try:
            self.outputs = _tensors(model(*args))
        finally:
            for handle in handles:
                handle.remove()
            for module, training in modes:
                module.train(training)
        self._note_shapes(self.outputs)

    def _hook(self, name: str):
        def record(module, args, kwargs, output) -> None:
            inputs = _tensors((args, kwargs))
            outputs = _tensors(output)
            self._note_shapes(inputs + outputs)
            stops = {id(edge[0]) for edge in map(_edge, inputs) if edge is not None}
            self.calls.append((name, stops, [e for e in map(_edge, outputs) if e is not None]))
        return record

    def _note_shapes(self, tensors) -> None:
        for tensor in tensors:
            edge = _edge(tensor)
            if edge is not None:
                self.shapes.setdefault((id(edge[0]), edge[1]), tuple(tensor.shape))


def _forward_order(roots: list) -> list:
    """Every node reachable from ``roots``, producers before consumers (an iterative
    post-order walk over ``next_functions``: deterministic, no recursion)."""
    order, seen = [], set()
    stack = [(node, False) for node in reversed(roots)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        stack.extend((parent, False) for parent, _ in reversed(node.next_functions)
                     if parent is not None and id(parent) not in seen)
    return order


def _scopes(calls: list) -> dict[int, str]:
    """Node id -> the dotted name of the innermost module call that computed it."""
    claimed: dict[int, str] = {}
    for name, stops, starts in calls:  # hooks fire innermost first: inner calls claim first
        stack, seen = [node for node, _ in starts], set()
        while stack:
            node = stack.pop()
            if id(node) in seen or id(node) in stops or hasattr(node, "variable"):
                continue
            seen.add(id(node))
            claimed.setdefault(id(node), name)
            stack.extend(parent for parent, _ in node.next_functions if parent is not None)
    return claimed


class _Names:
    """GraphDef names: ``Model/Child[attr]/...`` scopes, unique node names."""

    def __init__(self, model) -> None:
        self.classes = {name: type(module).__name__ for name, module in model.named_modules()}
        self.root = self.classes[""]
        self.used: set[str] = set()

    def scope(self, dotted: str) -> str:
        if not dotted:
            return self.root
        parts = dotted.split(".")
        return "/".join([self.root] + [f"{self.classes['.'.join(parts[:i + 1])]}[{part}]"
                                       for i, part in enumerate(parts)])

    def unique(self, name: str) -> str:
        candidate, count = name, 0
        while candidate in self.used:
            count += 1
            candidate = f"{name}.{count}"
        self.used.add(candidate)
        return candidate


class _Builder:
    """The GraphDef nodes of one pass: inputs, outputs, then parameters and ops in forward
    order, each op in the scope of the innermost module call that computed it."""

    def __init__(self, model, args: tuple) -> None:
        self.run = _Pass(model, args)
        roots = [edge[0] for edge in map(_edge, self.run.outputs) if edge is not None]
        if not roots and any(p.requires_grad for _, p in model.named_parameters()):
            raise RuntimeError("add_graph builds the graph from autograd, but the forward "
                               "pass recorded nothing: call it with grad mode enabled (not "
                               "inside no_grad() or inference_mode())")
        self.order = _forward_order(roots)
        for node in self.order:  # more shapes: the tensors each op saved for backward
            try:
                saved = node.saved_tensors
            except (RuntimeError, AttributeError, TypeError):
                continue
            self.run._note_shapes([t for t in saved if _is_tensor(t)])
        self.names, self.scopes = _Names(model), _scopes(self.run.calls)
        self.params = {id(p): name for name, p in model.named_parameters()}
        self.inputs = _tensors(args)
        self.node_names: dict[int, str] = {}  # node (or input tensor) id -> its name

    def nodes(self) -> list[NodeDef]:
        inputs = [self._input(i, tensor) for i, tensor in enumerate(self.inputs)]
        body = [node for node in map(self._node, self.order) if node is not None]
        outputs = [self._output(i, tensor) for i, tensor in enumerate(self.run.outputs)]
        return inputs + outputs + body

    def _input(self, index: int, tensor) -> NodeDef:
        name = self.names.unique(f"input/input.{index + 1}")
        self.node_names[id(tensor)] = name
        return NodeDef(name=name, op="IO Node", attr=_shape_attr([tensor.shape]))

    def _node(self, node) -> NodeDef | None:
        variable = getattr(node, "variable", None)
        if variable is not None and id(variable) in self.node_names:  # a model input
            self.node_names[id(node)] = self.node_names[id(variable)]
            return None
        if variable is not None:
            dotted = self.params.get(id(variable))
            if dotted is None:  # a leaf that requires grad but is no parameter
                name, op = self.names.unique(f"{self.names.root}/tensor"), "Tensor"
            else:
                module, _, attr = dotted.rpartition(".")
                name, op = self.names.unique(f"{self.names.scope(module)}/{attr}"), "Parameter"
            self.node_names[id(node)] = name
            return NodeDef(name=name, op=op, attr=_shape_attr([variable.shape]))
        label = _BACKWARD_SUFFIX.sub("", node.name()) or node.name()
        name = self.names.unique(f"{self.names.scope(self.scopes.get(id(node), ''))}/{label}")
        self.node_names[id(node)] = name
        edges = [self._source(parent, nr) for parent, nr in node.next_functions
                 if parent is not None]
        shapes, known = [], self.run.shapes
        while (id(node), len(shapes)) in known:
            shapes.append(known[id(node), len(shapes)])
        return NodeDef(name=name, op=node.name(), input=edges,
                       attr=_shape_attr(shapes) if shapes else {})

    def _source(self, node, output_nr: int) -> str:
        return self.node_names[id(node)] + (f":{output_nr}" if output_nr else "")

    def _output(self, index: int, tensor) -> NodeDef:
        edge = _edge(tensor)
        if edge is not None:
            sources = [self._source(*edge)]
        else:
            sources = [self.node_names[id(tensor)]] if id(tensor) in self.node_names else []
        return NodeDef(name=self.names.unique(f"output/output.{index + 1}"), op="IO Node",
                       input=sources, attr=_shape_attr([tensor.shape]))


def graph(model, input_to_model=None, verbose: bool = False, use_strict_trace: bool = True):
    """``(GraphDef, RunMetadata)`` of ``model`` called on ``input_to_model``, traced by the
    installed tracer (the model's engine's; without one, ``autograd_graph_def``).

    Args:
        model: a gradlog (or PyTorch) module.
        input_to_model: a tensor, or a tuple/list of tensors passed as positional arguments.
        verbose: print the graph's nodes.
        use_strict_trace: ``torch.jit.trace``'s ``strict`` for PyTorch modules (unused by
            gradlog's tracer).
    """
    tracer = graph_tracer()
    if tracer is None:
        return autograd_graph_def(model, input_to_model, verbose), run_metadata()
    return tracer(model, input_to_model, verbose, use_strict_trace), run_metadata()


def autograd_graph_def(model, input_to_model=None, verbose: bool = False) -> GraphDef:
    """The ``GraphDef`` of one forward pass of ``model`` (a module with PyTorch's
    ``named_modules``, forward hooks and autograd ``grad_fn``s) on ``input_to_model``."""
    if not callable(model) or not hasattr(model, "named_modules"):
        raise TypeError(f"add_graph needs a module (with named_modules() and a forward), got "
                        f"{type(model).__name__}")
    if input_to_model is None:
        args = ()
    elif isinstance(input_to_model, (tuple, list)):
        args = tuple(input_to_model)
    else:
        args = (input_to_model,)
    args = tuple(_as_leaf(a) for a in args)
    nodes = _Builder(model, args).nodes()
    if verbose:
        for node in nodes:
            shapes = [[d.size for d in s.dim] for s in node.attr["_output_shapes"].list.shape]
            print(f"{node.name} = {node.op}({', '.join(node.input)}) {shapes}")
    return GraphDef(node=nodes, versions=VersionDef(producer=_PRODUCER))


def _as_leaf(value):
    """A floating input as a new leaf that requires grad, so the pass records every op that
    depends on it, even in a model whose parameters are all frozen."""
    if not _is_tensor(value):
        return value
    leaf = value.detach()
    if to_numpy(leaf).dtype.kind in "fc":
        leaf.requires_grad_(True)
    return leaf
