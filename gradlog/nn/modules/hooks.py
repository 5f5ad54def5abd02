"""Module hook records, the process-wide (global) module hook registries, and the identity
autograd Functions that full backward hooks ride on.

A module call with backward hooks passes its tensor inputs and outputs through
``BackwardHookFunction`` (as PyTorch does). Unlike PyTorch, the wrapped tensors are not
views with in-place restrictions: in-place ops on a hooked module's inputs or outputs work
(a documented difference; PyTorch raises "Output 0 of BackwardHookFunction is a view ...").
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

from ...autograd.function import Function
from ...autograd.tensor import Tensor, wrap
from ...utils.hooks import HookRegistry, RemovableHandle, register

__all__ = ["register_module_forward_pre_hook", "register_module_forward_hook",
           "register_module_full_backward_pre_hook", "register_module_full_backward_hook",
           "register_module_backward_hook"]


@dataclass(frozen=True, slots=True)
class ForwardPreHook:
    fn: Any
    with_kwargs: bool = False


@dataclass(frozen=True, slots=True)
class ForwardHook:
    fn: Any
    with_kwargs: bool = False
    always_call: bool = False


global_forward_pre_hooks = HookRegistry()
global_forward_hooks = HookRegistry()
global_backward_pre_hooks = HookRegistry()
global_backward_hooks = HookRegistry()


def any_global_hooks() -> bool:
    return bool(global_forward_pre_hooks or global_forward_hooks or global_backward_pre_hooks
                or global_backward_hooks)


def register_module_forward_pre_hook(hook: Any) -> RemovableHandle:
    """Register ``hook(module, args) -> None | new_args`` for every module call in the process.

    Global hooks run before each module's own hooks. They are meant for debugging and
    profiling; plugins should register on the modules they watch.
    """
    return register(global_forward_pre_hooks, ForwardPreHook(hook))


def register_module_forward_hook(hook: Any, *, with_kwargs: bool = False,
                                 always_call: bool = False) -> RemovableHandle:
    """Register ``hook(module, args, output) -> None | new_output`` for every module call."""
    return register(global_forward_hooks, ForwardHook(hook, with_kwargs, always_call))


def register_module_full_backward_pre_hook(hook: Any) -> RemovableHandle:
    """Register ``hook(module, grad_output) -> None | new_grad_output`` for every module."""
    return register(global_backward_pre_hooks, hook)


def register_module_full_backward_hook(hook: Any) -> RemovableHandle:
    """Register ``hook(module, grad_input, grad_output) -> None | new_grad_input``."""
    return register(global_backward_hooks, hook)


def register_module_backward_hook(hook: Any) -> RemovableHandle:
    raise RuntimeError("gradlog does not implement the deprecated non-full module backward "
                       "hooks (they report the gradients of the module's last operation, not "
                       "of its inputs); use register_module_full_backward_hook instead.")


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
                if a._requires_grad:
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
        grad_input: list = [None] * self.n_args
        for pos, g in zip(self.input_positions, grads):
            grad_input[pos] = g
        for pos, t in self.zero_inputs.items():
            grad_input[pos] = wrap(t._data * 0 if t._data.dtype.kind != "b"
                                   else (t._data * 0).astype(bool))
        grad_input = tuple(grad_input)
        grad_output = self.grad_output if self.grad_output is not None \
            else (None,) * max(self.n_outputs, 1)
        for hook in self.hooks:
            result = hook(self.module, grad_input, grad_output)
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


def wrap_inputs(state: BackwardHookState, args: tuple) -> tuple:
    """Pass the grad-requiring tensor args through the input identity node."""
    if not state.input_positions:
        return args
    wrapped = BackwardHookFunction.apply(state, "input",
                                         *(args[i] for i in state.input_positions))
    new_args = list(args)
    for pos, w in zip(state.input_positions, wrapped):
        new_args[pos] = w
    return tuple(new_args)


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
                              if isinstance(o, Tensor) and o._requires_grad]
    if not state.output_positions:
        return result
    wrapped = BackwardHookFunction.apply(state, "output",
                                         *(items[i] for i in state.output_positions))
    out = list(items)
    for pos, w in zip(state.output_positions, wrapped):
        out[pos] = w
    return out[0] if single else tuple(out)


def propagate_inplace_inputs(module: Any, original: tuple, wrapped: tuple) -> None:
    """If ``forward`` changed a wrapped input in place, the caller's tensor changed too (same
    memory): give it the new history so later uses of it see the change."""
    for orig, new in zip(original, wrapped):
        if orig is new or not isinstance(new, Tensor):
            continue
        node = new._grad_fn
        if node is None or type(node).__name__ == "BackwardHookFunctionBackward":
            continue
        if orig._grad_fn is None and orig._requires_grad:
            raise RuntimeError(f"a leaf Variable that requires grad is being used in an "
                               f"in-place operation (inside {type(module).__name__}.forward).")
        orig._grad_fn = node
        if new._output_nr:
            orig._output_nr = new._output_nr
        else:
            orig.__dict__.pop("_output_nr", None)
        orig.__dict__.pop("_hooks", None)
