"""The backward engine: an iterative, deterministic walk of the graph from the roots.

Each node runs once, after every gradient contribution for it has arrived. Ready nodes run in
PyTorch's order: leaf sinks first, then the most recently created node. Per node and output,
the order is PyTorch's: tensor hooks (chained), the ``retain_grad`` store, node pre-hooks, the
backward function, node post-hooks; for a leaf: tensor hooks, accumulation into ``.grad``,
post-accumulate hooks.
"""

from __future__ import annotations

import heapq
import sys
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..utils.hooks import HookRegistry, RemovableHandle, register
from . import anomaly
from .function import _FREED, AccumulateGrad, Node, edge_of
from .grad_mode import state as _mode
from .tensor import Tensor, wrap

__all__ = ["backward", "grad", "register_backward_end_hook"]

_backward_end_hooks = HookRegistry()


def register_backward_end_hook(hook: Any) -> RemovableHandle:
    """Register ``hook() -> None``, called after every backward pass that accumulated into
    ``.grad`` (``Tensor.backward`` / ``autograd.backward``; not ``autograd.grad``).

    This is the engine's public end-of-backward signal: the plugin framework fires its
    ``on_after_backward`` event from it.
    """
    return register(_backward_end_hooks, hook)


def _as_tuple(x: Any) -> tuple:
    if isinstance(x, Tensor):
        return (x,)
    return tuple(x)


def _roots(tensors: tuple, grads: Any, what: str = "grad_output") -> list:
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
        else:
            if not isinstance(g, Tensor):
                g = wrap(np.asarray(g, dtype=t._data.dtype))
            elif not g._requires_grad:
                g = wrap(g._data)  # the caller keeps its tensor: the array is visibly shared
            if g._data.shape != t._data.shape:
                raise RuntimeError(
                    f"Mismatch in shape: {what}[{i}] has a shape of {g.shape!r} and output[{i}] "
                    f"has a shape of {t.shape!r}.")
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
    roots = _roots(tensors, grad_tensors)
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
    roots = _roots(outputs, grad_outputs)
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


class _Pass:
    """One backward pass: discovers the graph, then runs ready nodes in order."""

    def __init__(self, roots: list, targets: dict | None, *, accumulate: bool,
                 retain_graph: bool, create_graph: bool) -> None:
        self.roots = roots
        self.targets = targets          # edge -> tensor (backward inputs=) or None (grad)
        self.accumulate = accumulate
        self.retain_graph = retain_graph
        self.create_graph = create_graph
        self.captured: dict = {}

    # -- graph discovery -------------------------------------------------------------------
    def _discover(self) -> tuple[dict, set | None]:
        deps: dict[Node, int] = {}
        stack = []
        for (node, _), _g in self.roots:
            if node not in deps:
                deps[node] = 0
                stack.append(node)
        while stack:
            node = stack.pop()
            for child in node._next:  # a node, (node, output_nr) or None (see Node)
                if child is not None:
                    if child.__class__ is tuple:
                        child = child[0]
                    n = deps.get(child)
                    if n is None:
                        deps[child] = 1
                        stack.append(child)
                    else:
                        deps[child] = n + 1
        if self.targets is None:
            return deps, None
        return self._prune(deps)

    def _prune(self, deps: dict) -> tuple[dict, set]:
        """Keep only nodes from which a target is reachable; count dependencies among them."""
        target_nodes = {node for node, _ in self.targets}
        pending = dict(deps)
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
        return pruned, runs

    # -- execution -------------------------------------------------------------------------
    def run(self) -> dict:
        deps, runs = self._discover()
        buffers: dict[Node, list] = {}
        for (node, nr), g in self.roots:
            if node in deps:
                _add_to_buffer(buffers, node, nr, g, self.create_graph)
        heap: list = []
        tick = 0
        queued = set()
        for (node, _), _g in self.roots:  # only roots can have no dependencies
            if deps.get(node) == 0 and node not in queued:
                queued.add(node)
                heap.append((-node._seq, tick, node))
                tick += 1
        heapq.heapify(heap)
        create_graph = self.create_graph
        release = not self.retain_graph
        plain = self.targets is None  # no pruning, no captures: the common fast path
        pop, push = heapq.heappop, heapq.heappush
        prev_mode = _mode.grad_enabled
        _mode.grad_enabled = create_graph
        prev_err = np.seterr(all="ignore")  # 0 * inf in a backward is NaN, silently, as PyTorch
        anomaly_on = anomaly.state.enabled
        following = None  # a node to run next without going through the heap
        try:
            while following is not None or heap:
                if following is not None:
                    node, following = following, None
                else:
                    node = pop(heap)[2]
                grads = buffers.pop(node, None)
                if not plain and node not in runs:
                    if grads is not None:  # a capture target below which nothing is needed
                        self._run_node(node, grads, runs)
                    continue
                outputs = None
                if grads is not None:
                    if plain and node._plain and not anomaly_on:
                        # no hooks, no retain_grad, no anomaly mode: run the backward directly
                        saved = node._saved
                        if saved is _FREED:
                            node.saved_tensors  # noqa: B018  (raises the "second time" error)
                        outputs = node._backward(grads[0]) if len(grads) == 1 \
                            else node._backward(*grads)
                        if outputs.__class__ is not tuple:
                            outputs = (outputs,)
                        if len(outputs) != len(node._next):
                            raise _count_error(node, outputs)
                        if not create_graph:  # is a gradient passed through or returned
                            n = len(outputs)  # twice? (see _unalias; the common cases inline)
                            if n == 1:
                                if outputs[0] is grads[0]:
                                    outputs = _unalias(outputs, grads)
                            elif n == 2 and len(grads) == 1:
                                a, b = outputs
                                g = grads[0]
                                if a is g or b is g or (a is b and a is not None):
                                    outputs = _unalias(outputs, grads)
                            else:
                                outputs = _unalias(outputs, grads)
                        if release:
                            if saved is not None:
                                node._saved = _FREED
                            # arrays kept on ctx: the node frees them (reading __dict__
                            # creates it, so ops whose ctx is all slots skip the test)
                            if not node._ctx_in_slots and node.__dict__:
                                node._release()
                    else:
                        outputs = self._run_node(node, grads, runs)
                ready = None
                for child, g in zip(node._next, outputs or _nones(len(node._next))):
                    if child is None:
                        continue
                    nr = 0
                    if child.__class__ is tuple:  # an output other than the first
                        child, nr = child
                    n = deps.get(child)
                    if n is None:  # pruned (backward(inputs=...), grad): leads to no input
                        continue
                    if g is not None:
                        buf = buffers.get(child)
                        if buf is None:
                            if child._n_out == 1:
                                buffers[child] = [g]
                            else:
                                buf = buffers[child] = [None] * child._n_out
                                buf[nr] = g
                        else:
                            old = buf[nr]
                            if old is None:
                                buf[nr] = g
                            elif create_graph:
                                buf[nr] = old + g
                            else:
                                buf[nr] = wrap(old._data + g._data)
                    n -= 1
                    deps[child] = n
                    if n == 0:
                        if ready is not None:
                            push(heap, (-ready._seq, tick, ready))
                            tick += 1
                        ready = child
                if ready is not None:
                    # PyTorch's order: the ready node with the highest sequence number runs
                    # next. When nothing else is waiting, that is this one: skip the heap.
                    if heap and heap[0][0] < -ready._seq:
                        push(heap, (-ready._seq, tick, ready))
                        tick += 1
                    else:
                        following = ready
        finally:
            _mode.grad_enabled = prev_mode
            np.seterr(**prev_err)
        return self.captured

    def _run_node(self, node: Node, grads: list, runs: set | None) -> tuple | None:
        hooks_t = node._hooks_t
        if type(node) is AccumulateGrad:
            return self._run_leaf(node, grads[0])
        if hooks_t:
            for k, hooks in hooks_t.items():
                if hooks and grads[k] is not None:
                    grads[k] = run_tensor_hooks(hooks, grads[k])
        if node._retain and self.accumulate:
            for k, ref in node._retain.items():
                t = ref()
                if t is not None and grads[k] is not None:
                    if t._grad is None:
                        _accumulate_grad(t, grads[k], self.create_graph)
                    else:  # out of place, as PyTorch's retain_grad: a held .grad keeps its value
                        t._grad = t._grad + grads[k]
        if self.targets is not None:
            if not self.accumulate:  # (backward(inputs=) non-leaves retain their grad, above)
                for k, g in enumerate(grads):
                    edge = (node, k)
                    if edge in self.targets and g is not None:
                        self.captured[edge] = g
            if node not in runs:
                if self.accumulate:  # the node of a backward input: PyTorch runs its hooks
                    self._run_unneeded(node, grads)
                return None
        if not any(g is not None for g in grads):
            return None
        if node._pre_hooks:
            for hook in tuple(node._pre_hooks.values()):
                result = hook(tuple(grads))
                if result is not None:
                    grads = list(result)
        try:
            outputs = node._run_backward(grads)
            if not self.create_graph:
                outputs = _unalias(outputs, grads)
        except Exception:
            if node._trace is not None:
                _warn_forward_trace(node)
            raise
        if len(outputs) != len(node._next):
            raise _count_error(node, outputs)
        if anomaly.state.enabled and anomaly.state.check_nan:
            _check_anomaly(node, outputs)
        if node._post_hooks:
            for hook in tuple(node._post_hooks.values()):
                result = hook(tuple(outputs), tuple(grads))
                if result is not None:
                    outputs = tuple(result)
        if not self.retain_graph:
            node._release()
        return outputs

    def _run_unneeded(self, node: Node, grads: list) -> None:
        """A node none of whose outputs is needed: its hooks run (post-hooks see no gradients)
        and its saved tensors are released, as PyTorch does for a backward input's node."""
        if node._pre_hooks:
            for hook in tuple(node._pre_hooks.values()):
                result = hook(tuple(grads))
                if result is not None:
                    grads = list(result)
        if node._post_hooks:
            for hook in tuple(node._post_hooks.values()):
                hook((None,) * len(node._next), tuple(grads))
        if not self.retain_graph:
            node._release()

    def _run_leaf(self, node: AccumulateGrad, g: Tensor) -> None:
        leaf = node.variable
        if leaf._hooks:
            g = run_tensor_hooks(leaf._hooks, g)
        edge = (node, 0)
        if self.targets is not None:
            if edge not in self.targets:
                return None
            if not self.accumulate:
                self.captured[edge] = g
                return None
        _accumulate_grad(leaf, g, self.create_graph, steal=not leaf._hooks)
        if leaf._post_hooks:
            for hook in tuple(leaf._post_hooks.values()):
                result = hook(leaf)
                if result is not None and result is not leaf:  # PyTorch accepts `p.add_(...)`
                    if not isinstance(result, Tensor):
                        raise TypeError(f"expected Variable, but hook returned "
                                        f"'{type(result).__name__}'")
                    raise RuntimeError("Tensor post accumulate grad hooks should return None.")
        return None


def _children(node: Node) -> list:
    """The nodes a node's backward feeds (its ``_next`` entries, see Node)."""
    return [c[0] if c.__class__ is tuple else c for c in node._next if c is not None]


def _nones(n: int) -> tuple:
    return (None,) * n


def _count_error(node: Node, outputs: tuple) -> RuntimeError:
    return RuntimeError(f"function {node.name()} returned an incorrect number of gradients "
                        f"(expected {len(node._next)}, got {len(outputs)})")


def _add_to_buffer(buffers: dict, node: Node, nr: int, g: Tensor, create_graph: bool) -> None:
    buf = buffers.get(node)
    if buf is None:
        buf = buffers[node] = [None] * node._n_out
    old = buf[nr]
    if old is None:
        buf[nr] = g
    elif create_graph:
        buf[nr] = old + g
    else:
        buf[nr] = wrap(old._data + g._data)


def _accumulate_grad(t: Tensor, g: Tensor, create_graph: bool, steal: bool = False) -> None:
    data = g._data
    if data.shape != t._data.shape or data.dtype != t._data.dtype:
        if data.size == t._data.size or data.ndim < t._data.ndim:
            data = np.broadcast_to(data, t._data.shape).astype(t._data.dtype)
        else:
            raise RuntimeError(f"gradient of shape {tuple(data.shape)} and dtype {data.dtype} "
                               f"cannot be accumulated into a tensor of shape "
                               f"{tuple(t._data.shape)} and dtype {t._data.dtype}")
        g = wrap(data)
    old = t._grad
    if old is None:
        if create_graph:
            t._grad = g
        elif steal and data.base is None and data.flags.writeable and \
                data.flags.c_contiguous and sys.getrefcount(data) <= _SOLE_OWNER:
            t._grad = wrap(data)  # a fresh array nothing else holds: take it, as PyTorch does
        else:  # copy, so that .grad never aliases memory another tensor may change
            t._grad = wrap(np.array(data, order="C"))
    elif create_graph or old._requires_grad:
        t._grad = old + g
    else:
        try:
            np.add(old._data, data, out=old._data)
        except ValueError:  # a read-only or broadcast .grad set by the user
            old._data = old._data + data
        old._bump_version()


# References to a gradient array held by exactly one tensor, as counted inside
# _accumulate_grad: that tensor, the local name, and getrefcount's own argument.
_SOLE_OWNER = 3


def _unalias(outputs: tuple, grads: list) -> tuple:
    """Give gradients that a backward passed through unchanged, or returned twice, their own
    tensor objects: sharing then shows in the array's reference count, so a leaf never takes
    memory that another tensor still uses."""
    out = list(outputs)
    for i in range(len(out)):
        o = out[i]
        if o is None:
            continue
        shared = False
        for x in grads:
            if o is x:
                shared = True
                break
        if not shared:
            for j in range(i):
                if o is out[j]:
                    shared = True
                    break
        if shared:
            out[i] = wrap(o._data)
    return tuple(out)


def run_tensor_hooks(hooks: HookRegistry, grad: Tensor) -> Tensor:
    """Run tensor hooks in order, each seeing the previous one's replacement; check returns."""
    for hook in tuple(hooks.values()):
        result = hook(grad)
        if result is None:
            continue
        if not isinstance(result, Tensor):
            raise TypeError(f"expected Variable, but hook returned '{type(result).__name__}'")
        name = getattr(hook, "__name__", type(hook).__name__)
        if result._data.shape != grad._data.shape:
            raise RuntimeError(f"hook '{name}' has changed the size of value: expected "
                               f"{tuple(grad._data.shape)}, got {tuple(result._data.shape)}")
        if result._data.dtype != grad._data.dtype:
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
