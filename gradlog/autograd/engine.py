"""The backward engine: an iterative, deterministic walk of the graph from the roots.

Each node runs once, after every gradient contribution for it has arrived. Ready nodes run in
PyTorch's order: leaf sinks first, then the most recently created node. Per node, in one path
(``_Pass._run_node``): the tensor hooks of each output (chained), the ``retain_grad`` store, the
node's pre-hooks, its backward (for a leaf sink: accumulation into ``.grad`` and the
post-accumulate hooks), its post-hooks. A node with none of these takes the early exit.
"""

from __future__ import annotations

import itertools
import threading
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..utils.hooks import HookRegistry, RemovableHandle, register
from . import anomaly
from .grad_mode import state as _mode
from .node import ACC_SEQ, AccumulateGrad, Node, edge_of
from .saved import FREED
from .tensor import Tensor, wrap

__all__ = ["backward", "grad", "register_backward_end_hook", "current_graph_task_id",
           "will_engine_execute_node"]

_backward_end_hooks = HookRegistry()


def register_backward_end_hook(hook: Any) -> RemovableHandle:
    """Register ``hook() -> None``, called after every backward pass that accumulated into
    ``.grad`` (``Tensor.backward`` / ``autograd.backward``; not ``autograd.grad``; not a pass
    run inside another one, as a reentrant checkpoint does).

    This is the engine's public end-of-backward signal: the plugin framework fires its
    ``on_after_backward`` event from it.
    """
    return register(_backward_end_hooks, hook)


def _as_tuple(x: Any) -> tuple:
    if isinstance(x, Tensor):
        return (x,)
    return tuple(x)


def _roots(tensors: tuple, grads: Any, create_graph: bool) -> list:
    if grads is None:
        grads = (None,) * len(tensors)
    else:
        grads = _as_tuple(grads) if not isinstance(grads, (np.ndarray, float, int)) else (grads,)
        if len(grads) != len(tensors):
            raise RuntimeError(f"got {len(tensors)} tensors and {len(grads)} gradients")
    roots = []
    for i, (t, g) in enumerate(zip(tensors, grads)):
        if not isinstance(t, Tensor):
            raise TypeError(f"element {i} of tensors is a {type(t).__name__}, not a Tensor")
        if not t._requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have "
                               "a grad_fn")
        if g is None:
            if t._data.size != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs "
                                   f"(output {i} has shape {tuple(t._data.shape)}; pass a "
                                   "gradient of that shape)")
            g = wrap(np.ones(t._data.shape, dtype=t._data.dtype))
            g._owned = True
        else:
            if not isinstance(g, Tensor):
                g = wrap(np.asarray(g, dtype=t._data.dtype))
            elif not (g._requires_grad and create_graph):
                g = wrap(g._data)  # the caller keeps its tensor (and its array: not owned)
            if g._data.shape != t._data.shape:
                raise RuntimeError(
                    f"Mismatch in shape: grad_output[{i}] has a shape of {g.shape!r} and "
                    f"output[{i}] has a shape of {t.shape!r}.")
        roots.append((edge_of(t), g))
    return roots


def _input_edges(inputs: tuple) -> list:
    edges = []
    for t in inputs:
        if not isinstance(t, Tensor):
            raise TypeError(f"inputs must be Tensors, got {type(t).__name__}")
        if not t._requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
        edges.append(edge_of(t))
    return edges


def backward(tensors: Any, grad_tensors: Any = None, retain_graph: bool | None = None,
             create_graph: bool = False, inputs: Any = None) -> None:
    """Accumulate into ``.grad`` the gradients of ``tensors`` w.r.t. the graph's leaves
    (or only w.r.t. ``inputs``). See ``Tensor.backward``."""
    tensors = _as_tuple(tensors)
    if retain_graph is None:
        retain_graph = create_graph
    roots = _roots(tensors, grad_tensors, create_graph)
    targets = None
    if inputs is not None:
        inputs = _as_tuple(inputs)
        if not inputs:
            raise RuntimeError("`inputs` argument to `backward()` cannot be empty.")
        targets = {}
        for t, edge in zip(inputs, _input_edges(inputs)):
            targets[edge] = t
            if t._grad_fn is not None:  # as PyTorch: a non-leaf input retains its grad from now
                t.retain_grad()
    if create_graph:
        warnings.warn(
            "Using backward() with create_graph=True will create a reference cycle between the "
            "parameter and its gradient which can cause a memory leak. We recommend using "
            "autograd.grad when creating the graph to avoid this. If you have to use this "
            "function, make sure to reset the .grad fields of your parameters to None after use "
            "to break the cycle and avoid the leak.", UserWarning, stacklevel=3)
    _Pass(roots, targets, accumulate=True, retain_graph=retain_graph,
          create_graph=create_graph).run()
    if not _stack():  # the outermost pass (a reentrant checkpoint runs one inside another)
        for hook in tuple(_backward_end_hooks.values()):
            hook()


def grad(outputs: Any, inputs: Any, grad_outputs: Any = None, retain_graph: bool | None = None,
         create_graph: bool = False, only_inputs: bool = True, allow_unused: bool | None = None,
         is_grads_batched: bool = False, materialize_grads: bool = False) -> Any:
    """Return the gradients of ``outputs`` w.r.t. ``inputs`` without touching any ``.grad``.

    Returns a tuple with one entry per input (a dict when ``inputs`` is a dict). An input the
    outputs do not depend on raises unless ``allow_unused=True`` (then its entry is ``None``) or
    ``materialize_grads=True`` (then it is zeros).
    """
    if is_grads_batched:
        raise NotImplementedError("is_grads_batched=True is not supported by gradlog")
    names = None
    if isinstance(inputs, dict):
        names, inputs = list(inputs.keys()), tuple(inputs.values())
    outputs = _as_tuple(outputs)
    inputs = _as_tuple(inputs)
    if allow_unused is None:
        allow_unused = materialize_grads
    elif materialize_grads and not allow_unused:
        raise ValueError("Expected allow_unused to be True or not passed when "
                         "materialize_grads=True, but got: allow_unused=False.")
    if retain_graph is None:
        retain_graph = create_graph
    roots = _roots(outputs, grad_outputs, create_graph)
    edges = _input_edges(inputs)
    targets = {edge: None for edge in edges}
    captured = _Pass(roots, targets, accumulate=False, retain_graph=retain_graph,
                     create_graph=create_graph).run()
    result = []
    for i, (t, edge) in enumerate(zip(inputs, edges)):
        g = captured.get(edge)
        if g is None:
            if materialize_grads:
                g = wrap(np.zeros(t._data.shape, dtype=t._data.dtype))
            elif not allow_unused:
                raise RuntimeError(
                    f"The differentiated Tensor at index {i} appears to not have been used in "
                    "the graph. Set allow_unused=True if this is the desired behavior.")
        result.append(g)
    if names is not None:
        return dict(zip(names, result))
    return tuple(result)


# The passes running in this thread, innermost last (a hook or a checkpoint may run another).
_running = threading.local()
_pass_ids = itertools.count()


def _stack() -> list:
    stack = getattr(_running, "passes", None)
    if stack is None:
        stack = _running.passes = []
    return stack


def current_graph_task_id() -> int:
    """An id of the backward pass running in this thread, or -1 outside backward."""
    stack = _stack()
    return stack[-1].id if stack else -1


def current_pass() -> _Pass | None:
    stack = _stack()
    return stack[-1] if stack else None


def will_engine_execute_node(node: Node) -> bool:
    """Whether the backward pass running in this thread will run ``node`` (PyTorch's
    ``torch._C._will_engine_execute_node``, what ``register_multi_grad_hook`` counts on)."""
    stack = _stack()
    if not stack:
        raise RuntimeError("_will_engine_execute_node should only be called during the backward "
                           "pass")
    running = stack[-1]
    if type(node) is AccumulateGrad and not running.accumulate:
        raise RuntimeError("A leaf node was passed to _will_engine_execute_node but we are "
                           "currently running autograd.grad(). This is currently not supported.")
    return node in running.deps


class _Pass:
    """One backward pass: discovers the graph, then runs ready nodes in order."""

    def __init__(self, roots: list, targets: dict | None, *, accumulate: bool,
                 retain_graph: bool, create_graph: bool) -> None:
        self.id = next(_pass_ids)
        self.roots = roots
        self.targets = targets          # edge -> tensor (backward inputs=) or None (grad)
        self.accumulate = accumulate
        self.retain_graph = retain_graph
        self.create_graph = create_graph
        self.captured: dict = {}
        self.deps: dict = {}
        self.runs: set | None = None    # with targets: the nodes whose backward is needed
        self.fast = targets is None and not anomaly.state.enabled  # nodes may take the exit
        self.release = not retain_graph

    # -- graph discovery -------------------------------------------------------------------
    def _discover(self) -> None:
        deps: dict[Node, int] = {self.root: 0}
        stack = [self.root]
        while stack:
            node = stack.pop()
            for child in node._next:  # a node, (node, output_nr), None or False (see Node)
                if child:
                    if child.__class__ is tuple:
                        child = child[0]
                    n = deps.get(child)
                    if n is None:
                        deps[child] = 1
                        stack.append(child)
                    else:
                        deps[child] = n + 1
        self.deps = deps
        if self.targets is not None:
            self._prune()

    def _prune(self) -> None:
        """Keep only nodes from which a target is reachable; count dependencies among them."""
        target_nodes = {node for node, _ in self.targets}
        pending = dict(self.deps)
        topo = []
        ready = [node for node, n in pending.items() if n == 0]
        while ready:
            node = ready.pop()
            topo.append(node)
            for child in _children(node):
                pending[child] -= 1
                if pending[child] == 0:
                    ready.append(child)
        reach: set = set()
        runs: set = set()
        for node in reversed(topo):
            child_reach = any(child in reach for child in _children(node))
            if child_reach:
                runs.add(node)
            if child_reach or node in target_nodes:
                reach.add(node)
        pruned = {node: 0 for node in reach}
        for node in runs:
            for child in _children(node):
                if child in reach:
                    pruned[child] += 1
        self.deps, self.runs = pruned, runs

    # -- execution -------------------------------------------------------------------------
    def run(self) -> dict:
        root = self.root = _GraphRoot(self.roots)
        self._discover()
        deps = self.deps
        buffers: dict[Node, list] = {}  # node -> the gradients for its outputs, so far
        create_graph = self.create_graph
        ready = _ReadyQueue()
        prev_mode = _mode.grad_enabled
        _mode.grad_enabled = self.create_graph
        prev_err = np.seterr(all="ignore")  # 0 * inf in a backward is NaN, silently, as PyTorch
        stack = _stack()
        stack.append(self)
        try:
            following = root  # a ready node to run next without going through the queue
            while following is not None or ready.nodes:
                if following is not None:
                    node, following = following, None
                else:
                    node = ready.pop()
                if node is root:
                    outputs = root.grads
                else:
                    grads = buffers.pop(node, None)
                    outputs = None if grads is None else self._run_node(node, grads)
                for child, g in zip(node._next, outputs or _nones(len(node._next))):
                    if not child:  # an input that needs no gradient, or not a tensor
                        continue
                    nr = 0
                    if child.__class__ is tuple:  # an output other than the first
                        child, nr = child
                    n = deps.get(child)
                    if n is None:  # pruned (backward(inputs=...), grad): leads to no input
                        continue
                    if g is not None:  # add it to what the child's output nr has got so far
                        buf = buffers.get(child)
                        if buf is None:
                            buf = buffers[child] = [None] * child._n_out
                        old = buf[nr]
                        if old is None:
                            buf[nr] = g
                        elif create_graph:
                            buf[nr] = old + g
                        else:  # a sum the engine made: owned by it
                            total = buf[nr] = wrap(old._data + g._data)
                            total._owned = True
                    deps[child] = n - 1
                    if n == 1:
                        if following is not None:
                            ready.push(following)
                        following = child
                # the node that just became ready is the next to run when nothing else waits
                # (in a chain of ops, most of the time): then it skips the queue
                if following is not None and ready.nodes:
                    ready.push(following)
                    following = None
        finally:
            stack.pop()
            _mode.grad_enabled = prev_mode
            np.seterr(**prev_err)
        return self.captured

    def _run_node(self, node: Node, grads: list) -> tuple | None:
        """Run one node (see the module docstring); returns its input gradients, or None
        when nothing flows on from it."""
        if node._plain and self.fast:  # no hooks, no retained grad, nothing captured
            outputs = node._apply(grads)
            if len(outputs) > 1:
                disown_repeated(outputs)
            if self.release and node._saved is not None:
                node._saved = FREED  # a second backward through this node raises
            return outputs
        hooks_t = node._hooks_t
        if hooks_t:
            for k, hooks in hooks_t.items():
                if hooks:  # called with None when only a sibling output got a gradient
                    grads[k] = run_tensor_hooks(hooks, grads[k])
            disown(grads)  # a hook may hold what it saw or returned
        if node._retain and self.accumulate:
            for k, ref in node._retain.items():
                t = ref()
                if t is not None and grads[k] is not None:
                    _store_retained(t, grads[k], self.create_graph)
        if self.targets is not None:
            if not self.accumulate:  # (backward(inputs=) non-leaves retain their grad, above)
                for k, g in enumerate(grads):
                    edge = (node, k)
                    if edge in self.targets and g is not None:
                        self.captured[edge] = g
            if node not in self.runs and not (self.accumulate and type(node) is AccumulateGrad):
                if self.accumulate:  # the node of a backward input: PyTorch runs its hooks
                    self._run_unneeded(node, grads)
                return None
        if not any(g is not None for g in grads):
            return None
        if node._pre_hooks:
            grads = list(_run_node_hooks(node._pre_hooks, tuple(grads)))
            disown(grads)
        try:
            outputs = node._apply(grads)
        except Exception:
            if node._trace is not None:
                _warn_forward_trace(node)
            raise
        if anomaly.state.enabled and anomaly.state.check_nan:
            _check_anomaly(node, outputs)
        if node._post_hooks:  # they see one gradient per tensor input (see next_functions)
            positions = node._input_positions()
            grad_inputs = _run_node_hooks(node._post_hooks, tuple(outputs[i] for i in positions),
                                          tuple(grads))
            outputs = list(outputs)
            for i, g in zip(positions, grad_inputs):
                outputs[i] = g
            outputs = tuple(outputs)
            disown(outputs)
        elif node._fn is not None and not node._fn._array_forward:
            disown(outputs)  # a user Function's backward may keep what it returns
        elif len(outputs) > 1:
            disown_repeated(outputs)
        if self.release and node._saved is not None:
            node._saved = FREED
        return outputs

    def _run_unneeded(self, node: Node, grads: list) -> None:
        """A node none of whose outputs is needed: its hooks run (post-hooks see no gradients)
        and its saved tensors are released, as PyTorch does for a backward input's node."""
        if node._pre_hooks:
            grads = list(_run_node_hooks(node._pre_hooks, tuple(grads)))
        if node._post_hooks:
            _run_node_hooks(node._post_hooks, (None,) * len(node._input_positions()),
                            tuple(grads))
        if self.release and node._saved is not None:
            node._saved = FREED


class _ReadyQueue:
    """Nodes ready to run, the one with the highest sequence number first (the most recently
    created; leaf sinks before all). Ties are broken as PyTorch's engine breaks them: this is
    the binary heap of its ``std::priority_queue`` (libstdc++'s push_heap / pop_heap), so that
    hooks on several leaves fire in PyTorch's order."""

    __slots__ = ("nodes",)

    def __init__(self) -> None:
        self.nodes: list = []

    def push(self, node: Node) -> None:
        self.nodes.append(node)
        self._sift_up(len(self.nodes) - 1, node)

    def pop(self) -> Node:
        heap = self.nodes
        top = heap[0]
        last = heap.pop()
        n = len(heap)
        if n == 0:
            return top
        # move the hole at the top down to a leaf along the larger children, then sift the
        # last element up from there
        hole = child = 0
        while child < (n - 1) // 2:
            child = 2 * (child + 1)
            if heap[child]._seq < heap[child - 1]._seq:
                child -= 1
            heap[hole] = heap[child]
            hole = child
        if n % 2 == 0 and child == (n - 2) // 2:
            child = 2 * (child + 1)
            heap[hole] = heap[child - 1]
            hole = child - 1
        self._sift_up(hole, last)
        return top

    def _sift_up(self, hole: int, node: Node) -> None:
        """Put ``node`` at ``hole`` or above it, below the first parent not lower than it."""
        heap = self.nodes
        seq = node._seq
        while hole > 0:
            parent = (hole - 1) // 2
            if not heap[parent]._seq < seq:
                break
            heap[hole] = heap[parent]
            hole = parent
        heap[hole] = node


class _GraphRoot(Node):
    """Where a backward pass starts (as PyTorch's GraphRoot): its gradients are the roots'
    gradients, its edges lead to the roots."""

    __slots__ = ("grads",)

    def __init__(self, roots: list) -> None:
        self._next = tuple(node if nr == 0 else (node, nr) for (node, nr), _g in roots)
        self._seq = ACC_SEQ + 1
        self._saved = None
        self.grads = tuple(g for _edge, g in roots)


def _children(node: Node) -> list:
    """The nodes a node's backward feeds (its ``_next`` entries, see Node)."""
    return [c[0] if c.__class__ is tuple else c for c in node._next if c]


def _nones(n: int) -> tuple:
    return (None,) * n


def disown(grads: Sequence) -> None:
    """Gradients user code has seen or made (hooks, a user Function's backward): the pass
    does not own them, so ``accumulate_grad`` copies them rather than make them ``.grad``.
    What a built-in backward made, the engine's sums and its implicit ones stay owned."""
    for g in grads:
        if g is not None:
            g._owned = False


def disown_repeated(outputs: tuple) -> None:
    """One gradient a backward returned for two inputs is shared: owned by neither."""
    if len(outputs) == 2:  # most ops with two inputs (add returns one gradient for both)
        g = outputs[0]
        if g is outputs[1] and g is not None:
            g._owned = False
        return
    for i, g in enumerate(outputs):
        if g is not None and g._owned and any(g is h for h in outputs[i + 1:]):
            g._owned = False


def _store_retained(t: Tensor, g: Tensor, create_graph: bool) -> None:
    """``retain_grad``'s store: a copy (the gradient flows on; under ``create_graph`` a
    recorded one), accumulated out of place, so that a ``.grad`` the user holds keeps its
    value, as in PyTorch."""
    if t._grad is None:
        t._grad = g.clone() if create_graph else wrap(np.array(g._data, order="C"))
    else:
        t._grad = t._grad + g


def _run_node_hooks(hooks: HookRegistry, values: tuple, *grad_outputs: tuple) -> tuple:
    """Run a node's pre-hooks (``hook(grad_outputs)``) or post-hooks (``hook(grad_inputs,
    grad_outputs)``) in order; a returned tuple (same length) replaces ``values``."""
    for hook in tuple(hooks.values()):
        result = hook(values, *grad_outputs)
        if result is None:
            continue
        if not isinstance(result, tuple):
            raise TypeError(f"expected tuple, but hook returned '{type(result).__name__}'")
        if len(result) != len(values):
            name = getattr(hook, "__name__", type(hook).__name__)
            raise RuntimeError(f"hook '{name}' has returned an incorrect number of values "
                               f"(got {len(result)}, but expected {len(values)})")
        if grad_outputs and any(v is None and r is not None for v, r in zip(values, result)):
            raise RuntimeError("can't replace a None gradient with a non-None value")
        values = result
    return values


def run_tensor_hooks(hooks: HookRegistry, grad: Tensor | None) -> Tensor | None:
    """Run tensor hooks in order, each seeing the previous one's replacement; check returns."""
    for hook in tuple(hooks.values()):
        result = hook(grad)
        if result is None:
            continue
        if not isinstance(result, Tensor):
            raise TypeError(f"expected Variable, but hook returned '{type(result).__name__}'")
        name = getattr(hook, "__name__", type(hook).__name__)
        if grad is not None and result._data.shape != grad._data.shape:
            raise RuntimeError(f"hook '{name}' has changed the size of value: expected "
                               f"{tuple(grad._data.shape)}, got {tuple(result._data.shape)}")
        if grad is not None and result._data.dtype != grad._data.dtype:
            was, got = grad.dtype, result.dtype
            raise RuntimeError(f"hook '{name}' has changed the type of value (was "
                               f"gradlog.{was.legacy_name} got gradlog.{got.legacy_name}): "
                               f"expected {was.name}, got {got.name}")
        grad = result
    return grad


def _check_anomaly(node: Node, outputs: Sequence) -> None:
    for i, g in enumerate(outputs):
        if g is None:
            continue
        data = g._data
        if data.dtype.kind == "f" and not np.isfinite(data).all():
            kind = "nan" if np.isnan(data).any() else "inf"
            _warn_forward_trace(node)
            raise RuntimeError(f"Function '{node.name()}' returned {kind} values in its {i}th "
                               f"output.{_created_at(node)}")


def _created_at(node: Node) -> str:
    """`` The operation was created at FILE:LINE: code`` from the recorded forward stack: the
    innermost frame outside gradlog, i.e. the user's line."""
    import os
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for frame in reversed(node._trace or ()):
        if not os.path.abspath(frame.filename).startswith(package + os.sep):
            code = f": {frame.line}" if frame.line else ""
            return f" The operation was created at {frame.filename}:{frame.lineno}{code}"
    return ""


def _warn_forward_trace(node: Node) -> None:
    if node._trace is None:
        return
    import traceback
    stack = "".join(traceback.format_list(node._trace))
    warnings.warn(f"Error detected in {node.name()}. Traceback of forward call that caused the "
                  f"error:\n{stack}", UserWarning, stacklevel=2)
