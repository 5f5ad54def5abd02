"""Module backward hooks: the identity autograd Function full backward hooks ride on, and the
deprecated (legacy) backward hooks on the first output's node.

A module call with full backward hooks (or backward pre-hooks) passes its tensor inputs and
outputs through ``BackwardHookFunction`` (as PyTorch does). Unlike PyTorch, the wrapped tensors
are not views with in-place restrictions: in-place ops on a hooked module's inputs or outputs
work (a documented difference; PyTorch raises "Output 0 of BackwardHookFunction is a view ...").
"""

from __future__ import annotations

import warnings
from typing import Any

from ...autograd.function import Function
from ...autograd.node import rebase
from ...autograd.tensor import Tensor, array_of, wrap
from .hooks import WrappedHook

__all__ = ["BackwardHookState", "BackwardHookFunction", "wrap_inputs", "wrap_outputs",
           "propagate_inplace_inputs", "register_legacy_hooks"]

_NO_INPUT_GRAD_WARNING = (
    "Full backward hook is firing when gradients are computed with respect to module outputs "
    "since no inputs require gradients. See "
    "https://docs.pytorch.org/docs/main/generated/torch.nn.Module.html"
    "#torch.nn.Module.register_full_backward_hook for more details.")


class BackwardHookState:
    """What one module call's backward hooks need: the hooks (snapshotted at call time),
    where the tensor arguments sit among the positional args, and the grad_output."""

    def __init__(self, module: Any, pre_hooks: list, hooks: list, args: tuple) -> None:
        self.module = module
        self.pre_hooks = pre_hooks
        self.hooks = hooks
        self.n_args = len(args)
        self.input_positions: list[int] = []   # args wrapped by the input node
        self.zero_inputs: dict[int, Tensor] = {}  # tensor args that need no grad
        for i, a in enumerate(args):
            if isinstance(a, Tensor):
                if a.requires_grad:
                    self.input_positions.append(i)
                else:
                    self.zero_inputs[i] = a
        self.n_outputs = 0
        self.output_positions: list[int] = []
        self.grad_output: tuple | None = None

    # -- output side: all output gradients known -------------------------------------------
    def on_output_grads(self, grads: tuple) -> tuple:
        grad_output = [None] * self.n_outputs
        for pos, g in zip(self.output_positions, grads):
            grad_output[pos] = g
        grad_output = tuple(grad_output)
        for hook in self.pre_hooks:
            result = hook(self.module, grad_output)
            if result is None:
                continue
            if not isinstance(result, tuple):
                result = (result,)
            if len(result) != len(grad_output):
                raise RuntimeError(f"Backward pre hook returned an invalid number of "
                                   f"grad_output, got {len(result)}, but expected "
                                   f"{len(grad_output)}")
            grad_output = result
        self.grad_output = grad_output
        if not self.input_positions:  # no input side: nothing else needs grad_output
            if self.hooks:
                self._fire_without_inputs(grad_output)
            self.grad_output = None
        return tuple(grad_output[pos] for pos in self.output_positions)

    def _fire_without_inputs(self, grad_output: tuple) -> None:
        warnings.warn(_NO_INPUT_GRAD_WARNING, UserWarning, stacklevel=2)
        grad_input = (None,) * self.n_args
        for hook in self.hooks:
            result = hook(self.module, grad_input, grad_output)
            if result is not None and any(r is not None for r in result):
                raise RuntimeError("Backward hook for Modules where no input requires gradient "
                                   "should always return None or None for all gradients.")

    # -- input side: all input gradients known ---------------------------------------------
    def on_input_grads(self, grads: tuple) -> tuple:
        if self.grad_output is None:
            # NOTE: the gradient reached the module's inputs without passing through its
            # outputs in this pass: double backward through a graph the first backward
            # recorded. The hooks fired in that first backward; as PyTorch, not again.
            return grads
        grad_input: list = [None] * self.n_args
        for pos, g in zip(self.input_positions, grads):
            grad_input[pos] = g
        for pos, t in self.zero_inputs.items():
            data = array_of(t)
            grad_input[pos] = wrap(data * 0 if data.dtype.kind != "b"
                                   else (data * 0).astype(bool))
        grad_input = tuple(grad_input)
        for hook in self.hooks:
            result = hook(self.module, grad_input, self.grad_output)
            if result is None:
                continue
            if not isinstance(result, tuple):
                result = (result,)
            if len(result) != len(grad_input):
                raise RuntimeError(f"Backward hook returned an invalid number of grad_input, "
                                   f"got {len(result)}, but expected {len(grad_input)}")
            grad_input = result
        self.grad_output = None  # as PyTorch: not kept alive with the graph after the hooks
        return tuple(grad_input[pos] for pos in self.input_positions)


class BackwardHookFunction(Function):
    """Identity on the module's tensors; its backward runs the module's backward hooks.

    ``forward`` returns new tensors sharing memory and version counter with the originals.
    """

    @staticmethod
    def forward(ctx: Any, state: BackwardHookState, side: str, *tensors: Tensor) -> Any:
        ctx.set_materialize_grads(False)
        ctx.state, ctx.side = state, side
        return tuple(t.detach() for t in tensors)

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        state = ctx.state
        if ctx.side == "output":
            new = state.on_output_grads(grads)
        else:
            new = state.on_input_grads(grads)
        return (None, None, *new)


def _through_identity(state: BackwardHookState, side: str, items: tuple,
                      positions: list) -> list:
    """``items`` with those at ``positions`` passed through the identity node of ``side``."""
    wrapped = BackwardHookFunction.apply(state, side, *(items[i] for i in positions))
    out = list(items)
    for pos, w in zip(positions, wrapped):
        out[pos] = w
    return out


def wrap_inputs(state: BackwardHookState, args: tuple) -> tuple:
    """Pass the grad-requiring tensor args through the input identity node."""
    if not state.input_positions:
        return args
    return tuple(_through_identity(state, "input", args, state.input_positions))


def wrap_outputs(state: BackwardHookState, result: Any) -> Any:
    """Pass the output tensors through the output identity node (warn for other types)."""
    if isinstance(result, Tensor):
        items, single = (result,), True
    elif isinstance(result, tuple):
        items, single = result, False
    else:
        warnings.warn(f"For backward hooks to be called, module output should be a Tensor or a "
                      f"tuple of Tensors but received {type(result)}", UserWarning, stacklevel=3)
        return result
    state.n_outputs = len(items)
    state.output_positions = [i for i, o in enumerate(items)
                              if isinstance(o, Tensor) and o.requires_grad]
    if not state.output_positions:
        return result
    out = _through_identity(state, "output", items, state.output_positions)
    return out[0] if single else tuple(out)


def propagate_inplace_inputs(module: Any, original: tuple, wrapped: tuple) -> None:
    """If ``forward`` changed a wrapped input in place, the caller's tensor changed too (same
    memory): give it the new history so later uses of it see the change."""
    for orig, new in zip(original, wrapped):
        if orig is new or not isinstance(new, Tensor):
            continue
        node = new.grad_fn
        if node is None or node.name() == "BackwardHookFunctionBackward":
            continue
        if orig.is_leaf and orig.requires_grad:
            raise RuntimeError(f"a leaf Variable that requires grad is being used in an "
                               f"in-place operation (inside {type(module).__name__}.forward).")
        rebase(orig, node, new.output_nr)


def register_legacy_hooks(module: Any, hooks: list, args: tuple, result: Any) -> None:
    """The deprecated non-full backward hooks, as PyTorch has them: registered on the node of
    the first output tensor, so they see the gradients of the module's last operation
    (``hook(module, grad_input, grad_output)`` with that node's inputs and outputs), with
    PyTorch's FutureWarnings for the cases where that is not the module's gradient."""
    var = result
    while not isinstance(var, Tensor):
        var = next(v for v in var.values() if isinstance(v, Tensor)) if isinstance(var, dict) \
            else var[0]
    node = var.grad_fn
    if node is None:
        return
    for hook in hooks:
        node.register_hook(WrappedHook(hook, module))
    _warn_legacy(args, result, node)


def _warn_legacy(inputs: Any, result: Any, node: Any) -> None:
    def warn(text: str) -> None:
        warnings.warn(text, FutureWarning, stacklevel=4)

    if isinstance(result, Tensor):
        result = (result,)
    elif not (isinstance(result, tuple) and all(isinstance(r, Tensor) for r in result)):
        return warn("Using non-full backward hooks on a Module that does not return a single "
                    "Tensor or a tuple of Tensors is deprecated and will be removed in future "
                    "versions. This hook will be missing some of the grad_output. Please use "
                    "register_full_backward_hook to get the documented behavior.")
    if isinstance(inputs, Tensor):
        inputs = (inputs,)
    elif not (isinstance(inputs, tuple) and all(isinstance(i, Tensor) for i in inputs)):
        return warn("Using non-full backward hooks on a Module that does not take as input a "
                    "single Tensor or a tuple of Tensors is deprecated and will be removed in "
                    "future versions. This hook will be missing some of the grad_input. Please "
                    "use register_full_backward_hook to get the documented behavior.")
    out_nodes = {id(r.grad_fn): r.grad_fn for r in result if r.grad_fn is not None}
    if not out_nodes or (len(out_nodes) == 1 and id(node) not in out_nodes):
        return warn("Using a non-full backward hook when outputs are nested in python data "
                    "structure is deprecated and will be removed in future versions. This hook "
                    "will be missing some grad_output.")
    if len(out_nodes) > 1:
        return warn("Using a non-full backward hook when outputs are generated by different "
                    "autograd Nodes is deprecated and will be removed in future versions. This "
                    "hook will be missing some grad_output. Please use "
                    "register_full_backward_hook to get the documented behavior.")
    input_nodes = {id(i.grad_fn) for i in inputs if i.grad_fn is not None}
    if input_nodes != {id(n) for n, _ in node.next_functions}:
        warn("Using a non-full backward hook when the forward contains multiple autograd Nodes "
             "is deprecated and will be removed in future versions. This hook will be missing "
             "some grad_input. Please use register_full_backward_hook to get the documented "
             "behavior.")
