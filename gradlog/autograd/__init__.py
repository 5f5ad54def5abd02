"""The autograd engine: Tensor, Function, backward/grad, grad modes, gradcheck, anomaly mode."""

from . import graph, ops  # noqa: F401  (ops installs the Tensor methods)
from .anomaly import (
    detect_anomaly,
    is_anomaly_check_nan_enabled,
    is_anomaly_enabled,
    set_detect_anomaly,
)
from .engine import backward, grad, register_backward_end_hook
from .function import Function, FunctionCtx
from .grad_mode import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)
from .gradcheck import GradcheckError, gradcheck, gradgradcheck
from .tensor import Tensor

__all__ = [
    "Tensor", "Function", "FunctionCtx", "backward", "grad", "register_backward_end_hook",
    "gradcheck", "gradgradcheck", "GradcheckError", "detect_anomaly", "set_detect_anomaly",
    "is_anomaly_enabled", "is_anomaly_check_nan_enabled", "no_grad", "enable_grad",
    "set_grad_enabled", "inference_mode", "is_grad_enabled", "is_inference_mode_enabled",
]
