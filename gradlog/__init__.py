"""gradlog: a numpy autograd engine with PyTorch's API, hook registries, plugins and
TensorBoard logging. This file only re-exports; nothing is defined here."""

from . import starting  # noqa: F401, I001  (first: Ctrl-C while the command imports the rest)
from . import autograd, data, distributed, nn, optim, utils
from .autograd.anomaly import is_anomaly_check_nan_enabled, is_anomaly_enabled
from .autograd.creation import (
    arange,
    as_tensor,
    empty,
    empty_like,
    eye,
    from_numpy,
    full,
    full_like,
    linspace,
    normal,
    ones,
    ones_like,
    rand,
    rand_like,
    randint,
    randint_like,
    randn,
    randn_like,
    randperm,
    tensor,
    zeros,
    zeros_like,
)
from .autograd.dtypes import (
    bool_ as bool,  # noqa: A004
)
from .autograd.dtypes import (
    double,
    dtype,
    float,
    float16,
    float32,
    float64,
    get_default_dtype,
    half,
    int,
    int8,
    int16,
    int32,
    int64,
    long,
    set_default_dtype,
    short,
    uint8,
)
from .autograd.grad_mode import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)
from .autograd.ops.activation import (
    elu,
    gelu,
    hardtanh,
    leaky_relu,
    log_softmax,
    logsigmoid,
    relu,
    relu6,
    sigmoid,
    silu,
    softmax,
    softplus,
    tanh,
)
from .autograd.ops.compare import (
    allclose,
    argsort,
    eq,
    equal,
    ge,
    gt,
    isclose,
    isfinite,
    isinf,
    isnan,
    le,
    logical_and,
    logical_not,
    logical_or,
    logical_xor,
    lt,
    masked_fill,
    maximum,
    minimum,
    ne,
    nonzero,
    sort,
    topk,
    where,
)
from .autograd.ops.conversion import clone
from .autograd.ops.cumulative import cumprod, cumsum, logcumsumexp
from .autograd.ops.indexing import gather, index_select, masked_select, take
from .autograd.ops.inplace_view import as_strided
from .autograd.ops.join import (
    cat,
    chunk,
    concat,
    concatenate,
    hstack,
    narrow,
    select,
    split,
    stack,
    unbind,
    vstack,
)
from .autograd.ops.out import (
    add,
    bmm,
    div,
    divide,
    dot,
    floor_divide,
    matmul,
    mm,
    mul,
    multiply,
    neg,
    negative,
    outer,
    pow,
    reciprocal,
    remainder,
    rsub,
    square,
    sub,
    subtract,
    true_divide,
)
from .autograd.ops.reduction import (
    all,
    amax,
    amin,
    aminmax,
    any,
    argmax,
    argmin,
    count_nonzero,
    logsumexp,
    max,
    mean,
    min,
    nanmean,
    nansum,
    norm,
    prod,
    sum,
)
from .autograd.ops.shape import (
    broadcast_to,
    flatten,
    flip,
    movedim,
    permute,
    reshape,
    squeeze,
    swapaxes,
    t,
    tile,
    transpose,
    unflatten,
    unsqueeze,
)
from .autograd.ops.statistics import median, nanmedian, std, std_mean, var, var_mean
from .autograd.ops.unary import (
    abs,
    ceil,
    clamp,
    clip,
    cos,
    erf,
    exp,
    expm1,
    floor,
    frac,
    log,
    log1p,
    log2,
    log10,
    round,
    rsqrt,
    sign,
    sin,
    sqrt,
    tan,
    trunc,
)
from .autograd.random import (
    Generator,
    default_generator,
    get_rng_state,
    initial_seed,
    manual_seed,
    seed,
    set_rng_state,
)
from .autograd.tensor import Size, Tensor, is_inference
from .plugin.watch import watch
from .serialization import load, save


def __getattr__(name: str):
    # The TensorBoard writer is imported on first use: `import gradlog` stays light.
    if name == "tensorboard":
        import importlib
        return importlib.import_module(".tensorboard", __name__)
    raise AttributeError(f"module 'gradlog' has no attribute {name!r}")

__version__ = "0.1.0"
