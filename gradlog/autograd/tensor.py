"""The Tensor: a numpy array plus the autograd state PyTorch users know.

Operations (``+``, ``exp``, ``sum``, indexing, ...) are defined by family in ``ops/`` and
installed as methods by ``ops/__init__.py``; this file holds the state, the attribute
protocol (``grad``, ``requires_grad``, ``is_leaf``, ...), the tensor hooks and ``backward``.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ..utils.hooks import HookRegistry, RemovableHandle, register
from . import dtypes
from .grad_mode import INFERENCE
from .grad_mode import mode as _mode_flags
from .grad_mode import state as _mode

__all__ = ["Tensor", "Size", "VersionCounter", "wrap", "is_inference"]

_NON_LEAF_GRAD_WARNING = (
    "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its .grad "
    "attribute won't be populated during autograd.backward(). If you indeed want the .grad "
    "field to be populated for a non-leaf Tensor, use .retain_grad() on the non-leaf Tensor. "
    "If you access the non-leaf Tensor by mistake, make sure you access the leaf Tensor "
    "instead. See github.com/pytorch/pytorch/pull/30531 for more information.")


class VersionCounter:
    """Counts in-place changes of a buffer; shared by a tensor and its views."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


class Size(tuple):
    """A tensor's shape: a tuple that prints as ``gradlog.Size([2, 3])``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"gradlog.Size({list(self)})"

    def numel(self) -> int:
        n = 1
        for d in self:
            n *= d
        return n


class Tensor:
    """An n-dimensional array that can record the operations applied to it.

    Create tensors with ``gl.tensor(data)`` and the factory functions (``gl.zeros``, ...);
    ``gl.Tensor(data)`` is PyTorch's legacy constructor (always float32).
    """

    # Hot attributes live in slots; rarely used ones are class-level defaults that an
    # instance overrides in its __dict__ only when needed (hooks, views, retained grads).
    # ``_owned``: nobody but this tensor holds its array. Set when the array is made (by an op
    # outside recording, or by the backward engine), cleared by the engine once user code has
    # seen the tensor (engine.disown), taken only by accumulate_grad (which then gives the
    # array to ``.grad`` without a copy).
    __slots__ = ("_data", "_requires_grad", "_grad_fn", "_owned", "__dict__", "__weakref__")

    _output_nr = 0
    _grad = None
    _vc: VersionCounter | None = None
    _hooks: HookRegistry | None = None
    _post_hooks: HookRegistry | None = None
    _retains_grad = False
    _grad_acc = None
    _base: Tensor | None = None     # views (see views.py): the root base,
    _view_chain: tuple = ()         # how to recreate the view from it,
    _view_version = 0               # the shared version when the grad_fn was set,
    _layout = 0                     # a root base: how often it changed shape in place (t_),
    _base_layout = 0                # a view: its root's _layout when the view was made
    _made_in = ""                   # a view made in "inference" or "no_grad" mode of a
                                    # tensor that requires grad (it does too, without grad_fn)
    _inference = False

    __array_priority__ = 1000  # numpy defers `ndarray op Tensor` to Tensor's reflected ops

    def __init__(self, *args: Any) -> None:
        from .creation import legacy_tensor_data
        self._data = legacy_tensor_data(args)
        self._requires_grad = False
        self._grad_fn = None
        self._owned = False
        if _mode_flags() & INFERENCE:
            self._inference = True

    # -- attributes --------------------------------------------------------------------
    @property
    def data(self) -> Tensor:
        """The same values, detached, sharing memory but not the version counter."""
        return wrap(self._data)

    @data.setter
    def data(self, value: Tensor) -> None:
        self._data = value._data if isinstance(value, Tensor) else np.asarray(value)

    @property
    def grad(self) -> Tensor | None:
        if self._grad_fn is not None and not self._retains_grad and self._grad is None:
            warnings.warn(_NON_LEAF_GRAD_WARNING, UserWarning, stacklevel=2)
        return self._grad

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(f"assigned grad expected to be a Tensor or None but got "
                                f"grad of type {type(value).__name__}")
            if value._data.shape != self._data.shape:
                raise RuntimeError(
                    f"attempting to assign a gradient of size '{list(value._data.shape)}' to a "
                    f"tensor of size '{list(self._data.shape)}'. Please ensure that the "
                    "gradient and the tensor are the same size")
            if value._data.dtype != self._data.dtype:
                raise RuntimeError(
                    f"attempting to assign a gradient with dtype '{value.dtype}' to a tensor "
                    f"with dtype '{self.dtype}'. Please ensure that the gradient and the tensor "
                    "have the same dtype")
        self._grad = value

    @grad.deleter
    def grad(self) -> None:
        self._grad = None

    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        self.requires_grad_(value)

    @property
    def grad_fn(self) -> Any:
        if self._base is not None:
            from .views import refresh_view
            refresh_view(self)
        return self._grad_fn

    @property
    def output_nr(self) -> int:
        """Which output of its grad_fn this tensor is."""
        return self._output_nr

    @property
    def is_leaf(self) -> bool:
        return self._grad_fn is None

    @property
    def retains_grad(self) -> bool:
        return self._retains_grad

    @property
    def shape(self) -> Size:
        return Size(self._data.shape)

    @property
    def dtype(self) -> dtypes.dtype:
        return dtypes.as_dtype(self._data.dtype)

    @property
    def ndim(self) -> int:
        return self._data.ndim

    @property
    def device(self) -> str:
        return "cpu"

    @property
    def is_cuda(self) -> bool:
        return False

    @property
    def _version(self) -> int:
        vc = self._vc
        return vc.value if vc is not None else 0

    @property
    def is_floating_point_dtype(self) -> bool:
        return self._data.dtype.kind == "f"

    def is_floating_point(self) -> bool:
        return self._data.dtype.kind == "f"

    def is_inference(self) -> bool:
        return self._inference

    def size(self, dim: int | None = None) -> Any:
        if dim is None:
            return Size(self._data.shape)
        return self._data.shape[_wrap_dim(dim, self._data.ndim)]

    def dim(self) -> int:
        return self._data.ndim

    def numel(self) -> int:
        return self._data.size

    def element_size(self) -> int:
        return self._data.itemsize

    def nelement(self) -> int:
        return self._data.size

    def data_ptr(self) -> int:
        return self._data.__array_interface__["data"][0]

    # -- conversion ----------------------------------------------------------------------
    def item(self) -> Any:
        if self._data.size != 1:
            raise RuntimeError(f"a Tensor with {self._data.size} elements cannot be converted "
                               "to Scalar")
        return self._data.item()

    def numpy(self, *, force: bool = False) -> np.ndarray:
        """The underlying array (shared memory). Refused for tensors that require grad."""
        if self._requires_grad and not force:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use "
                               "tensor.detach().numpy() instead.")
        return self._data

    def tolist(self) -> Any:
        return self._data.tolist()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        if dtype is not None and np.dtype(dtype) != self._data.dtype:
            return self._data.astype(dtype)
        return self._data

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __bool__(self) -> bool:
        if self._data.size != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return bool(self._data.item())

    def __index__(self) -> int:
        if self._data.dtype.kind not in "iub" or self._data.size != 1:
            raise TypeError("only integer tensors of a single element can be converted to an "
                            "index")
        return int(self._data.item())

    def __len__(self) -> int:
        if self._data.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    def __iter__(self) -> Any:
        if self._data.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self._data.shape[0]))

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        from .formatting import tensor_repr
        return tensor_repr(self)

    def __format__(self, spec: str) -> str:
        if self._data.ndim == 0 and spec:
            return self._data.item().__format__(spec)
        return repr(self)

    def __reduce_ex__(self, protocol: Any) -> Any:
        # As PyTorch: the values, ``requires_grad`` and the user's attributes; never the
        # graph, ``.grad`` or the hooks (warned about). Checkpoints use gl.save, not this.
        for hook in (self._hooks or {}).values():
            if getattr(hook, "__gradlog_unserializable__", False):
                continue
            warnings.warn(f"backward hook {hook!r} on tensor will not be serialized.  If this "
                          "is expected, you can decorate the function with "
                          "@gradlog.utils.hooks.unserializable_hook to suppress this warning",
                          UserWarning, stacklevel=2)
        state = {k: v for k, v in self.__dict__.items() if k not in _AUTOGRAD_STATE}
        return (_rebuild, (type(self), np.array(self._data), self._requires_grad, state))

    def __deepcopy__(self, memo: dict) -> Tensor:
        if not self.is_leaf:
            raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) "
                               "support the deepcopy protocol at the moment.")
        new = type(self).__new__(type(self))
        new._data = self._data.copy()
        new._requires_grad = self._requires_grad
        new._grad_fn = None
        new._owned = False
        if self._grad is not None:
            new._grad = self._grad.__deepcopy__(memo)
        for key, value in self.__dict__.items():
            if key not in _AUTOGRAD_STATE:
                new.__dict__[key] = value
        memo[id(self)] = new
        return new

    # -- autograd ------------------------------------------------------------------------
    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """Set ``requires_grad`` on a leaf; returns ``self``."""
        if self._grad_fn is not None:
            if requires_grad:
                return self
            raise RuntimeError(
                "you can only change requires_grad flags of leaf variables. If you want to use a "
                "computed variable in a subgraph that doesn't require differentiation use "
                "var_no_grad = var.detach().")
        if requires_grad and self._data.dtype.kind != "f":
            raise RuntimeError("only Tensors of floating point dtype can require gradients")
        if requires_grad and self._inference and not _mode.inference:
            raise RuntimeError("Setting requires_grad=True on inference tensor outside "
                               "InferenceMode is not allowed.")
        self._requires_grad = bool(requires_grad)
        return self

    def _is_view(self) -> bool:
        """Whether this tensor is a view of another (``_base`` is that tensor)."""
        return self._base is not None

    def detach(self) -> Tensor:
        """A new leaf sharing memory and the version counter, with ``requires_grad=False``
        (a view: an inference tensor only if this one is)."""
        out = _new(Tensor)
        out._data = self._data
        out._requires_grad = False
        out._grad_fn = None
        out._owned = False
        if self._inference:
            out._inference = True
        vc = self._vc
        if vc is None:
            vc = self._vc = VersionCounter()
        out._vc = vc
        return out

    def detach_(self) -> Tensor:
        """Make this tensor a leaf that does not require grad, in place (not for views)."""
        if self._base is not None:
            raise RuntimeError(
                "Can't detach views in-place. Use detach() instead. If you are using "
                "DistributedDataParallel (DDP) for training, and gradient_as_bucket_view is set "
                "as True, gradients are views of DDP buckets, and hence detach_() cannot be "
                "called on these gradients. To fix this error, please refer to the "
                "Optimizer.zero_grad() function in torch/optim/optimizer.py as the solution.")
        self._grad_fn = None
        self._requires_grad = False
        self.__dict__.pop("_output_nr", None)
        return self

    def retain_grad(self) -> None:
        """Keep this non-leaf tensor's gradient in ``.grad`` after backward (after its hooks)."""
        if not self._requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        node = self.grad_fn
        if node is None or self._retains_grad:
            return
        if node._retain is None:
            node._retain = {}
            node._plain = False
        import weakref
        node._retain[self._output_nr] = weakref.ref(self)
        self._retains_grad = True

    def _move_retained_grad(self, old_node: Any, old_nr: int) -> None:
        """After this tensor's grad_fn changed (an in-place op, a regenerated view), retain its
        gradient at the new node instead of the old one, as PyTorch does."""
        if self.__dict__.pop("_retains_grad", False):
            if old_node is not None and old_node._retain:
                old_node._retain.pop(old_nr, None)
            self.retain_grad()

    def register_hook(self, hook: Any) -> RemovableHandle:
        """Register ``hook(grad) -> Tensor | None``, run when this tensor's gradient is known.

        The hook gets the total gradient of this backward pass; a returned tensor (same shape
        and dtype) replaces it for everything downstream. Hooks run in registration order.
        """
        if not self._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        node = self.grad_fn
        hooks = self._hooks
        if hooks is None:  # a non-leaf's hooks belong to the node that made it (its output)
            hooks = self._hooks = HookRegistry() if node is None else \
                node._tensor_hooks(self._output_nr)
        return register(hooks, hook)

    def register_post_accumulate_grad_hook(self, hook: Any) -> RemovableHandle:
        """Register ``hook(tensor) -> None``, run after backward accumulated into ``.grad``."""
        if not self._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self._grad_fn is not None:
            raise RuntimeError(
                "post accumulate grad hooks cannot be registered on non-leaf tensors")
        hooks = self._post_hooks
        if hooks is None:
            hooks = self._post_hooks = HookRegistry()
        return register(hooks, hook)

    def backward(self, gradient: Any = None, retain_graph: bool | None = None,
                 create_graph: bool = False, inputs: Any = None) -> None:
        """Compute the gradient of this tensor w.r.t. graph leaves, accumulating into ``.grad``.

        Args:
            gradient: d(something)/d(self); required unless this tensor has one element.
            retain_graph: keep saved tensors for another backward (default: ``create_graph``).
            create_graph: record the backward itself, for higher-order gradients.
            inputs: accumulate only into these tensors (leaves or not).
        """
        from .engine import backward
        backward(self, gradient, retain_graph, create_graph, inputs=inputs)

    # -- in-place bookkeeping (used by the in-place ops) -----------------------------------
    def _check_inplace(self, others: tuple = ()) -> None:
        """PyTorch's refusals of an in-place change of this tensor by an op whose other
        inputs are ``others``."""
        if self._inference and not _mode.inference:
            raise RuntimeError(
                "Inplace update to inference tensor outside InferenceMode is not allowed.You "
                "can make a clone to get a normal tensor before doing inplace update.See "
                "https://github.com/pytorch/rfcs/pull/17 for more details.")
        if self._made_in and _mode.grad_enabled and (
                self._requires_grad or any(isinstance(o, Tensor) and o._requires_grad
                                           for o in others)):
            from .views import made_in_mode_error
            raise made_in_mode_error(self._made_in, base_changed=False)
        if self._requires_grad and self._grad_fn is None and _mode.grad_enabled:
            which = "a leaf Variable" if self._base is None else "a view of a leaf Variable"
            raise RuntimeError(f"{which} that requires grad is being used in an in-place "
                               "operation.")
        base = self._base
        if (base is not None and base._requires_grad and base._grad_fn is None
                and _mode.grad_enabled):
            raise RuntimeError("a view of a leaf Variable that requires grad is being used in "
                               "an in-place operation.")

    def _bump_version(self) -> None:
        vc = self._vc
        if vc is None:
            vc = self._vc = VersionCounter()
        vc.value += 1


_AUTOGRAD_STATE = frozenset({"_grad", "_vc", "_hooks", "_post_hooks", "_retains_grad",
                             "_grad_acc", "_base", "_view_chain", "_view_version",
                             "_made_in", "_output_nr", "_inference", "_layout",
                             "_base_layout"})


def _rebuild(cls: type, data: np.ndarray, requires_grad: bool, state: dict) -> Tensor:
    """A leaf tensor of ``cls`` from a pickle (see ``Tensor.__reduce_ex__``)."""
    t = _new(cls)
    init_leaf(t, data)
    t._requires_grad = requires_grad
    t.__dict__.update(state)
    return t


def init_leaf(t: Tensor, data: np.ndarray) -> None:
    """Make ``t``, a new instance of a subclass (``nn.Parameter``, ``nn.Buffer``), a leaf
    around ``data`` (shared memory, no copy) that does not require grad: how a subclass's
    ``__init__`` sets autograd's fields without knowing them. Its array is not owned (the
    caller may hold it)."""
    t._data = data
    t._requires_grad = False
    t._grad_fn = None
    t._owned = False


def array_of(t: Tensor) -> np.ndarray:
    """The array behind ``t`` (shared memory, no checks): with ``wrap``, how code built on
    autograd (``nn.functional``) goes from tensors to arrays without its private fields."""
    return t._data


def wrap(data: np.ndarray) -> Tensor:
    """A new leaf tensor around ``data`` (no copy, no checks): the engine's constructor. In
    inference mode it is an inference tensor, as every tensor created there."""
    t = _new(Tensor)
    t._data = data
    t._requires_grad = False
    t._grad_fn = None
    t._owned = False
    if _mode_flags() & INFERENCE:
        t._inference = True
    return t


_new = object.__new__


def is_inference(input: Tensor) -> bool:
    """Whether ``input`` is an inference tensor: created in inference mode (and not a view of a
    normal tensor made there)."""
    if not isinstance(input, Tensor):
        raise TypeError(f"is_inference(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(input).__name__}")
    return input._inference


def _wrap_dim(dim: int, ndim: int) -> int:
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], "
                         f"but got {dim})")
    return dim % n
