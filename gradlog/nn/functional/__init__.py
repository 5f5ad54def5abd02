"""``gradlog.nn.functional``: the stateless form of every layer and loss, with PyTorch's names
and signatures. One file per family; this package only re-exports. (``linear`` is the
engine's fused op. The files are named so that no submodule is shadowed by a function.)"""

from ...autograd.ops.linalg import linear
from .activation import (
    elu,
    gelu,
    hardtanh,
    leaky_relu,
    log_softmax,
    logsigmoid,
    relu,
    relu6,
    relu_,
    sigmoid,
    silu,
    softmax,
    softmin,
    softplus,
    tanh,
)
from .classification import cross_entropy, nll_loss
from .conv import conv1d, conv2d
from .loss import binary_cross_entropy, binary_cross_entropy_with_logits, l1_loss, mse_loss
from .normalization import batch_norm, layer_norm, normalize
from .pooling import adaptive_avg_pool2d, avg_pool2d, max_pool2d
from .regularization import dropout
from .sampling import interpolate, pad
from .sparse import embedding, one_hot

__all__ = [
    "linear", "conv1d", "conv2d", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d",
    "batch_norm", "layer_norm", "normalize", "dropout", "embedding", "one_hot",
    "relu", "relu_", "leaky_relu", "gelu", "sigmoid", "tanh", "softmax", "softmin", "log_softmax",
    "silu",
    "elu", "softplus", "logsigmoid", "hardtanh", "relu6",
    "cross_entropy", "nll_loss", "mse_loss", "l1_loss", "binary_cross_entropy",
    "binary_cross_entropy_with_logits", "pad", "interpolate",
]
