"""Linear, Identity, Flatten/Unflatten, Dropout, Embedding and the activation layers:
gradients, defaults, in-place variants, reprs and errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from nncheck import check, check_vjp, rand

import gradlog as gl
from gradlog import nn
from gradlog.nn import functional as F


def test_linear_forward_gradients_and_default_init():
    gl.manual_seed(0)
    layer = nn.Linear(400, 50)
    bound = 1 / math.sqrt(400)
    w = layer.weight.detach().numpy()
    assert w.shape == (50, 400) and np.abs(w).max() <= bound and np.abs(w).max() > 0.99 * bound
    assert np.abs(layer.bias.detach().numpy()).max() <= bound
    assert layer.weight.dtype == gl.float32
    check(lambda x, w, b: F.linear(x, w, b), rand(3, 2, 4), rand(5, 4, seed=1), rand(5, seed=2),
          double=True)
    assert repr(nn.Linear(2, 3, bias=False)) == \
        "Linear(in_features=2, out_features=3, bias=False)"
    assert nn.Linear(2, 3, dtype=gl.float64).weight.dtype == gl.float64


def test_linear_backward_is_differentiable_in_every_argument_and_upstream_gradient():
    """Linear's gradients come from one node (LinearGrad), computing only the wanted ones:
    its own backward is checked for each combination of inputs that require grad."""
    check_vjp(lambda x, w, b: F.linear(x, w, b), rand(3, 4), rand(5, 4, seed=1),
              rand(5, seed=2))
    check_vjp(lambda x, w, b: F.linear(x, w, b), rand(2, 3, 4), rand(5, 4, seed=1),
              rand(5, seed=2))
    check_vjp(lambda x, w, b: F.linear(x, w, b), rand(4), rand(5, 4, seed=1), rand(5, seed=2))
    check_vjp(lambda x, w: F.linear(x, w), rand(3, 4, grad=False), rand(5, 4, seed=1))
    check_vjp(lambda x, b: F.linear(x, rand(5, 4, seed=1, grad=False), b), rand(3, 4),
              rand(5, seed=2))


def test_linear_wrong_feature_count_names_both_shapes():
    with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied "
                       r"\(8x5 and 4x3\)"):
        nn.Linear(4, 3)(gl.zeros(8, 5))


def test_identity_flatten_unflatten():
    x = gl.randn(2, 3, 4, 5)
    assert nn.Identity(54, unused=True)(x) is x
    assert nn.Flatten()(x).shape == (2, 60)
    assert nn.Flatten(0, 2)(x).shape == (24, 5)
    assert nn.Unflatten(1, (2, 30))(nn.Flatten()(x)).shape == (2, 2, 30)
    assert repr(nn.Flatten()) == "Flatten(start_dim=1, end_dim=-1)"
    assert repr(nn.Unflatten(1, (2, 5))) == "Unflatten(dim=1, unflattened_size=(2, 5))"
    with pytest.raises(RuntimeError, match=r"don't multiply up to the size of dim 1 \(5\)"):
        nn.Unflatten(1, (2, 3))(gl.zeros(2, 5))


def test_dropout_mask_statistics_scaling_and_eval_identity():
    gl.manual_seed(0)
    drop = nn.Dropout(0.3)
    x = gl.ones(200, 500)
    y = drop(x).numpy()
    kept = y != 0
    assert abs(kept.mean() - 0.7) < 0.005
    np.testing.assert_allclose(y[kept], 1 / 0.7, rtol=1e-6)
    assert y.dtype == np.float32
    drop.eval()
    assert drop(x) is x
    assert repr(nn.Dropout()) == "Dropout(p=0.5, inplace=False)"


def test_dropout_is_reproducible_with_manual_seed_and_its_gradient_uses_the_mask():
    x = gl.ones(10, 10, requires_grad=True)
    gl.manual_seed(3)
    a = F.dropout(x, 0.5)
    gl.manual_seed(3)
    b = F.dropout(x, 0.5)
    assert gl.equal(a, b)
    a.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), a.detach().numpy())
    assert F.dropout(x, 0.0) is x and (F.dropout(x, 1.0).detach().numpy() == 0).all()
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1, but "
                       "got 1.5"):
        nn.Dropout(1.5)


def test_dropout_gradcheck_with_a_fixed_seed():
    def fn(x):
        gl.manual_seed(7)
        return F.dropout(x, 0.4)
    check(fn, rand(4, 5), double=True)


def test_embedding_lookup_accumulates_repeated_indices_and_skips_padding():
    emb = nn.Embedding(5, 3, padding_idx=1)
    assert (emb.weight.detach().numpy()[1] == 0).all()
    idx = gl.tensor([[0, 2, 0], [1, 2, 0]])
    out = emb(idx)
    assert out.shape == (2, 3, 3)
    out.sum().backward()
    np.testing.assert_array_equal(emb.weight.grad.numpy()[:, 0], [3, 0, 2, 0, 0])
    assert repr(emb) == "Embedding(5, 3, padding_idx=1)"


def test_embedding_gradcheck_and_from_pretrained():
    idx = gl.tensor([[3, 1], [1, 1]])
    check(lambda w: F.embedding(idx, w), rand(4, 2), double=True)
    frozen = nn.Embedding.from_pretrained(gl.eye(3))
    assert not frozen.weight.requires_grad and frozen(gl.tensor([2])).tolist() == [[0, 0, 1]]


def test_embedding_padding_gradient_and_its_adjoint():
    idx = gl.tensor([[3, 1], [1, 0]])
    w, g = rand(4, 2), rand(2, 2, 2, seed=1)
    gw = gl.autograd.grad((F.embedding(idx, w, padding_idx=3) * g).sum(), w,
                          create_graph=True)[0]
    expected = np.zeros((4, 2))
    for (i, j), row in np.ndenumerate(idx.numpy()):
        if row != 3:
            expected[row] += g.detach().numpy()[i, j]
    np.testing.assert_allclose(gw.detach().numpy(), expected)
    h = rand(4, 2, seed=2, grad=False)
    gg = gl.autograd.grad((gw * h).sum(), g)[0].numpy()  # the adjoint: h at idx, 0 at padding
    keep = (idx.numpy() != 3)[..., None]
    np.testing.assert_allclose(gg, h.numpy()[idx.numpy()] * keep)
def test_embedding_errors_name_the_values():
    with pytest.raises(IndexError, match=r"index out of range in self: index 10 is not in "
                       r"\[0, 10\)"):
        nn.Embedding(10, 3)(gl.tensor([10]))
    with pytest.raises(RuntimeError, match="'indices' to have one of the following scalar "
                       "types: Long, Int"):
        nn.Embedding(10, 3)(gl.tensor([1.0]))
    with pytest.raises(AssertionError, match="Padding_idx must be within num_embeddings"):
        nn.Embedding(10, 3, padding_idx=10)


@pytest.mark.parametrize("layer, fn", [
    (nn.ReLU(), F.relu), (nn.LeakyReLU(0.2), lambda x: F.leaky_relu(x, 0.2)),
    (nn.GELU(), F.gelu), (nn.GELU("tanh"), lambda x: F.gelu(x, approximate="tanh")),
    (nn.Sigmoid(), F.sigmoid), (nn.Tanh(), F.tanh), (nn.SiLU(), F.silu), (nn.ELU(), F.elu),
    (nn.Softplus(), F.softplus), (nn.Softmax(1), lambda x: F.softmax(x, 1)),
    (nn.LogSoftmax(-1), lambda x: F.log_softmax(x, -1)),
])
def test_activation_layers_match_functional_and_gradcheck(layer, fn):
    x = rand(3, 4)
    assert gl.allclose(layer(x), fn(x))
    check(layer, x)


@pytest.mark.parametrize("layer, text", [
    (nn.ReLU(), "ReLU()"), (nn.ReLU(True), "ReLU(inplace=True)"),
    (nn.LeakyReLU(), "LeakyReLU(negative_slope=0.01)"),
    (nn.LeakyReLU(0.2, True), "LeakyReLU(negative_slope=0.2, inplace=True)"),
    (nn.GELU(), "GELU(approximate='none')"), (nn.Softmax(1), "Softmax(dim=1)"),
    (nn.LogSoftmax(dim=-1), "LogSoftmax(dim=-1)"), (nn.ELU(), "ELU(alpha=1.0)"),
    (nn.Softplus(), "Softplus(beta=1.0, threshold=20.0)"), (nn.SiLU(), "SiLU()"),
])
def test_activation_repr(layer, text):
    assert repr(layer) == text


@pytest.mark.parametrize("fn", [
    lambda x, inplace: F.relu(x, inplace=inplace),
    lambda x, inplace: F.leaky_relu(x, 0.1, inplace=inplace),
    lambda x, inplace: F.elu(x, inplace=inplace),
    lambda x, inplace: F.silu(x, inplace=inplace),
])
def test_inplace_activations_overwrite_their_input_and_keep_gradients(fn):
    base = rand(3, 4)
    y = base * 1.0
    out = fn(y, True)
    assert out is y and y._version == 1
    out.sum().backward()
    expected = gl.autograd.grad(fn(base * 1.0, False).sum(), base)[0]
    np.testing.assert_allclose(base.grad.numpy(), expected.numpy(), rtol=1e-12)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        fn(rand(2), True)


def test_relu_module_inplace_calls_relu_():
    x = gl.tensor([-1.0, 2.0])
    out = nn.ReLU(inplace=True)(x)
    assert out is x and x.tolist() == [0.0, 2.0]


def test_softmax_without_dim_warns():
    with pytest.warns(UserWarning, match="Implicit dimension choice for softmax"):
        nn.Softmax()(gl.zeros(2, 3))
