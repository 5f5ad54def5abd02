"""Every layer, loss and functional op against PyTorch: the same module built in both
libraries, PyTorch's weights copied into gradlog's (which also checks that the state_dict
keys agree), the same float32 input and upstream gradient; outputs, input gradients and
parameter gradients must agree to float32 precision. Also reprs, BatchNorm's running
statistics over several steps, default initialization ranges, and error messages."""

from __future__ import annotations

import numpy as np
import pytest

import gradlog as gl
from gradlog import nn
from gradlog.nn import functional as GF

torch = pytest.importorskip("torch")
TF = torch.nn.functional


@pytest.fixture(autouse=True)
def one_torch_thread():
    """One PyTorch thread: the oracle stays fast on a small busy machine; no value changes."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def close(got, want, rtol=1e-5):
    got = got.detach().numpy() if isinstance(got, gl.Tensor) else np.asarray(got)
    want = want.detach().numpy()
    assert got.shape == want.shape and got.dtype == want.dtype
    scale = float(np.abs(want).max()) if want.size else 1.0
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * max(scale, 1e-3))


def twins(build):
    """The module built by ``build(N)`` in PyTorch and in gradlog, with PyTorch's weights."""
    tm, gm = build(torch.nn), build(nn)
    tstate = tm.state_dict()
    assert list(gm.state_dict()) == list(tstate)
    gm.load_state_dict({k: gl.tensor(v.numpy()) for k, v in tstate.items()})
    assert repr(gm) == repr(tm)
    return tm, gm


def run_both(tm, gm, inputs, seed=100):
    """Forward both on the same inputs, backward the same random upstream gradient (drawn
    independently of the inputs); compare outputs, input and parameter gradients. ``tm`` and
    ``gm`` may be modules or plain functions of the inputs."""
    rng = np.random.default_rng(seed)
    tin = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in inputs]
    gin = [gl.tensor(a, requires_grad=a.dtype.kind == "f") for a in inputs]
    tout, gout = tm(*tin), gm(*gin)
    close(gout, tout)
    up = rng.standard_normal(tuple(tout.shape)).astype(np.float32)
    tout.backward(torch.tensor(up))
    gout.backward(gl.tensor(up))
    for t, g in zip(tin, gin):
        if t.requires_grad:
            close(g.grad, t.grad)
    if isinstance(gm, nn.Module):
        for (name, tp), (gname, gp) in zip(tm.named_parameters(), gm.named_parameters()):
            assert name == gname
            close(gp.grad, tp.grad)
    return tout, gout


def randn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


LAYERS = {
    "linear": (lambda N: N.Linear(5, 3), [(4, 5)]),
    "linear_3d_no_bias": (lambda N: N.Linear(5, 3, bias=False), [(2, 4, 5)]),
    "conv": (lambda N: N.Conv2d(3, 16, 3, padding=1), [(2, 3, 8, 8)]),
    "conv_strided": (lambda N: N.Conv2d(4, 6, (3, 2), stride=2, padding=(1, 0), dilation=2,
                                         groups=2), [(2, 4, 9, 8)]),
    "conv_same": (lambda N: N.Conv2d(2, 3, 4, padding="same", bias=False), [(2, 2, 7, 6)]),
    "conv_unbatched": (lambda N: N.Conv2d(2, 3, 3), [(2, 5, 5)]),
    "conv_stride_over_kernel": (lambda N: N.Conv2d(2, 3, 2, stride=3), [(2, 2, 8, 7)]),
    "conv1d": (lambda N: N.Conv1d(3, 4, 3, stride=2, padding=1), [(2, 3, 9)]),
    "maxpool": (lambda N: N.MaxPool2d(2), [(2, 3, 8, 8)]),
    "maxpool_ceil": (lambda N: N.MaxPool2d(3, 2, 1, ceil_mode=True), [(2, 3, 8, 7)]),
    "maxpool_dilated": (lambda N: N.MaxPool2d(2, 1, dilation=2), [(1, 2, 6, 6)]),
    "maxpool_gaps": (lambda N: N.MaxPool2d(2, 3), [(1, 2, 8, 7)]),
    "avgpool": (lambda N: N.AvgPool2d(2), [(2, 3, 8, 8)]),
    "avgpool_ceil": (lambda N: N.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False),
                     [(2, 3, 8, 7)]),
    "adaptive": (lambda N: N.AdaptiveAvgPool2d((3, 5)), [(2, 3, 8, 7)]),
    "adaptive_global": (lambda N: N.AdaptiveAvgPool2d(1), [(2, 3, 8, 7)]),
    "batchnorm2d": (lambda N: N.BatchNorm2d(3), [(4, 3, 5, 5)]),
    "batchnorm1d": (lambda N: N.BatchNorm1d(3, momentum=None), [(6, 3)]),
    "batchnorm1d_3d": (lambda N: N.BatchNorm1d(3, affine=False), [(4, 3, 5)]),
    "layernorm": (lambda N: N.LayerNorm(5), [(4, 5)]),
    "layernorm_2d_no_bias": (lambda N: N.LayerNorm([3, 5], bias=False), [(2, 3, 5)]),
    "flatten": (lambda N: N.Flatten(), [(2, 3, 4)]),
    "unflatten": (lambda N: N.Unflatten(1, (2, 6)), [(2, 12)]),
    "identity": (lambda N: N.Identity(), [(2, 3)]),
    "relu": (lambda N: N.ReLU(), [(3, 4)]),
    "leaky_relu": (lambda N: N.LeakyReLU(0.2), [(3, 4)]),
    "gelu": (lambda N: N.GELU(), [(3, 4)]),
    "gelu_tanh": (lambda N: N.GELU("tanh"), [(3, 4)]),
    "sigmoid": (lambda N: N.Sigmoid(), [(3, 4)]),
    "tanh": (lambda N: N.Tanh(), [(3, 4)]),
    "softmax": (lambda N: N.Softmax(1), [(3, 4)]),
    "log_softmax": (lambda N: N.LogSoftmax(-1), [(3, 4)]),
    "silu": (lambda N: N.SiLU(), [(3, 4)]),
    "elu": (lambda N: N.ELU(0.5), [(3, 4)]),
    "softplus": (lambda N: N.Softplus(2.0, 5.0), [(3, 4)]),
    "cnn": (lambda N: N.Sequential(
        N.Conv2d(1, 4, 3, padding=1), N.ReLU(), N.MaxPool2d(2),
        N.Conv2d(4, 6, 3, padding=1, bias=False), N.BatchNorm2d(6), N.ReLU(), N.MaxPool2d(2),
        N.Flatten(), N.Dropout(0.0), N.Linear(6 * 4 * 4, 5)), [(3, 1, 16, 16)]),
}


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")
@pytest.mark.parametrize("case", list(LAYERS))
def test_layer_forward_and_backward_match_pytorch(case):
    build, shapes = LAYERS[case]
    torch.manual_seed(0)
    tm, gm = twins(build)
    run_both(tm, gm, [randn(*s, seed=i) for i, s in enumerate(shapes)])


def test_embedding_matches_pytorch():
    tm, gm = twins(lambda N: N.Embedding(6, 3, padding_idx=2))
    idx = np.array([[0, 2, 5], [5, 5, 1]])
    tout, gout = tm(torch.tensor(idx)), gm(gl.tensor(idx))
    close(gout, tout)
    up = randn(2, 3, 3)
    tout.backward(torch.tensor(up))
    gout.backward(gl.tensor(up))
    close(gm.weight.grad, tm.weight.grad)


def test_batchnorm_running_statistics_match_after_training_steps():
    for momentum in (0.1, None):
        tm, gm = twins(lambda N, m=momentum: N.BatchNorm2d(3, momentum=m))
        for step in range(4):
            x = randn(5, 3, 4, 4, seed=step) * (step + 1) + step
            close(gm(gl.tensor(x)), tm(torch.tensor(x)))
        for name in ("running_mean", "running_var"):
            close(getattr(gm, name), getattr(tm, name))
        assert gm.num_batches_tracked.item() == tm.num_batches_tracked.item() == 4
        tm.eval(), gm.eval()
        run_both(tm, gm, [randn(2, 3, 4, 4, seed=9)])


def test_dropout_eval_is_identity_and_training_keeps_pytorchs_scaling():
    tm, gm = twins(lambda N: N.Dropout(0.25))
    x = randn(100, 100) + 3
    out = gm(gl.tensor(x)).numpy()
    kept = out != 0
    np.testing.assert_allclose(out[kept], x[kept] / 0.75, rtol=1e-6)
    assert abs(kept.mean() - 0.75) < 0.02
    tm.eval(), gm.eval()
    close(gm(gl.tensor(x)), tm(torch.tensor(x)))


def test_dropout_is_pytorchs_cpu_product_with_the_mask_as_a_constant_second_input():
    """PyTorch computes dropout on the CPU as ``input * mask``: the node is MulBackward0, its
    second input (the mask) takes no gradient, and the input's gradient is the mask; p=0 and
    an empty input return the input itself."""
    def graph(L, F):
        log = []
        for p, inplace in ((0.5, False), (1.0, False), (0.5, True)):
            x = L.ones(3, 4, requires_grad=True)
            y = F.dropout(x * 1, p, True, inplace)
            nodes = y.grad_fn.next_functions
            log += [y.grad_fn.name(), len(nodes), nodes[0][0].name(), nodes[1]]
            y.sum().backward()
            log.append(bool((x.grad.numpy() == y.detach().numpy()).all()))  # (the mask)
            log.append(sorted(set(np.unique(y.detach().numpy()).tolist())))
        x = L.ones(3, requires_grad=True)
        empty = L.ones(0, 3, requires_grad=True)
        log += [F.dropout(x, 0.0, True) is x, F.dropout(empty, 0.5, True) is empty]
        return log

    got, want = graph(gl, GF), graph(torch, TF)
    assert got == want
    assert want[:4] == ["MulBackward0", 2, "MulBackward0", (None, 0)]


def test_default_initialization_ranges_match_pytorch():
    """Weights and biases are uniform on [-1/sqrt(fan_in), 1/sqrt(fan_in)] in both: within
    the bound, reaching near it, and with the uniform's std, b/sqrt(3), to four standard
    errors of a sample std (sigma * sqrt(0.2 / n) for a uniform), so that a 60-value Conv1d
    weight is not compared with 15% between two samples, which failed for some draws."""
    gl.manual_seed(0), torch.manual_seed(0)
    for build, fan_in in ((lambda N: N.Linear(50, 20), 50), (lambda N: N.Conv2d(4, 8, 3), 36),
                          (lambda N: N.Conv1d(6, 2, 5), 30)):
        tm, gm = build(torch.nn), build(nn)
        bound = 1 / np.sqrt(fan_in)
        for (name, tp), (_, gp) in zip(tm.named_parameters(), gm.named_parameters()):
            t, g = tp.detach().numpy(), gp.detach().numpy()
            assert g.shape == t.shape and g.dtype == t.dtype
            assert np.abs(t).max() <= bound and np.abs(g).max() <= bound, name
            if name == "weight":
                assert np.abs(g).max() > 0.9 * bound
                sigma = bound / np.sqrt(3)
                for values in (g, t):
                    assert abs(values.std() - sigma) < 4 * sigma * np.sqrt(0.2 / values.size)
    t = torch.nn.Embedding(100, 50).weight.detach().numpy()
    g = nn.Embedding(100, 50).weight.detach().numpy()
    assert abs(g.std() - t.std()) < 0.05


LOSSES = {
    "ce": (lambda L, x, t: L.cross_entropy(x, t), "index"),
    "ce_weight_ignore_smooth": (lambda L, x, t, w: L.cross_entropy(
        x, t, w, ignore_index=1, label_smoothing=0.15), "index+weight"),
    "ce_sum": (lambda L, x, t: L.cross_entropy(x, t, reduction="sum"), "index"),
    "ce_none_smooth": (lambda L, x, t: L.cross_entropy(x, t, reduction="none",
                                                       label_smoothing=0.3), "index"),
    "ce_probs": (lambda L, x, q: L.cross_entropy(x, q, label_smoothing=0.1), "probs"),
    "nll": (lambda L, x, t, w: L.nll_loss(L.log_softmax(x, 1), t, w), "index+weight"),
    "mse": (lambda L, x, y: L.mse_loss(x, y), "real"),
    "l1_sum": (lambda L, x, y: L.l1_loss(x, y, reduction="sum"), "real"),
    "bce": (lambda L, x, y: L.binary_cross_entropy(L.sigmoid(x), y), "unit"),
    "bce_logits": (lambda L, x, y, w: L.binary_cross_entropy_with_logits(
        x, y, pos_weight=w), "unit+weight"),
}


def _loss_args(kind):
    rng = np.random.default_rng(1)
    t = rng.integers(0, 4, 7)
    w = rng.uniform(0.5, 2, 4).astype(np.float32)
    if kind == "index":
        return [t]
    if kind == "index+weight":
        return [t, w]
    if kind == "probs":
        return [rng.dirichlet(np.ones(4), 7).astype(np.float32)]
    if kind == "real":
        return [randn(7, 4, seed=3)]
    y = rng.uniform(0, 1, (7, 4)).astype(np.float32)
    return [y] if kind == "unit" else [y, w]


@pytest.mark.parametrize("case", list(LOSSES))
def test_loss_value_and_gradient_match_pytorch(case):
    fn, kind = LOSSES[case]
    x = randn(7, 4, seed=5) * 3
    args = _loss_args(kind)
    tx, gx = torch.tensor(x, requires_grad=True), gl.tensor(x, requires_grad=True)
    tl = fn(TF, tx, *(torch.tensor(a) for a in args))
    gloss = fn(GF, gx, *(gl.tensor(a) for a in args))
    close(gloss, tl)
    tl.sum().backward()
    gloss.sum().backward()
    close(gx.grad, tx.grad)


def test_loss_modules_match_pytorch_on_spatial_targets():
    x = randn(2, 5, 3, 4)
    t = np.random.default_rng(0).integers(0, 5, (2, 3, 4))
    t[0, 0, 0] = -100
    for build in (lambda N: N.CrossEntropyLoss(label_smoothing=0.2),
                  lambda N: N.CrossEntropyLoss(reduction="none")):
        tm, gm = twins(build)
        run_both(lambda a, tm=tm: tm(a, torch.tensor(t)), lambda a, gm=gm: gm(a, gl.tensor(t)),
                 [x])


FUNCTIONAL = {
    "interp_bilinear": lambda L, x: L.interpolate(x, size=(7, 9), mode="bilinear"),
    "interp_corners": lambda L, x: L.interpolate(x, scale_factor=3, mode="bilinear",
                                                 align_corners=True),
    "interp_nearest": lambda L, x: L.interpolate(x, scale_factor=(2, 1.5)),
    "pad": lambda L, x: L.pad(x, (1, 2, 0, 1), value=0.5),
    "normalize": lambda L, x: L.normalize(x, dim=1),
    "layer_norm": lambda L, x: L.layer_norm(x, (4,)),
    "batch_norm_eval": lambda L, x: L.batch_norm(x, torch.ones(3) if L is TF else gl.ones(3),
                                                 torch.full((3,), 2.0) if L is TF
                                                 else gl.full((3,), 2.0)),
    "max_pool_ceil": lambda L, x: L.max_pool2d(x, 2, ceil_mode=True),
    "avg_pool_pad": lambda L, x: L.avg_pool2d(x, 3, 2, 1, divisor_override=4),
}


@pytest.mark.parametrize("case", list(FUNCTIONAL))
def test_functional_ops_match_pytorch(case):
    fn = FUNCTIONAL[case]
    x = randn(2, 3, 5, 4)
    tx, gx = torch.tensor(x, requires_grad=True), gl.tensor(x, requires_grad=True)
    tout, gout = fn(TF, tx), fn(GF, gx)
    close(gout, tout)
    up = randn(*tout.shape, seed=1)
    tout.backward(torch.tensor(up))
    gout.backward(gl.tensor(up))
    close(gx.grad, tx.grad)


def test_max_pool_indices_match_pytorch():
    x = randn(2, 3, 7, 8)
    tout, tidx = TF.max_pool2d(torch.tensor(x), 3, 2, 1, ceil_mode=True, return_indices=True)
    gout, gidx = GF.max_pool2d(gl.tensor(x), 3, 2, 1, ceil_mode=True, return_indices=True)
    close(gout, tout)
    np.testing.assert_array_equal(gidx.numpy(), tidx.numpy())


def _message(fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - compared below
        return type(exc).__name__, str(exc)
    return None, "no error"


@pytest.mark.parametrize("program", [
    lambda L, N: N.Conv2d(3, 16, 3)(L.zeros(8, 1, 28, 28)),
    lambda L, N: N.Conv2d(3, 16, 3)(L.zeros(8, 3, 28, 28, 1)),
    lambda L, N: N.Conv2d(3, 16, 3)(L.zeros(1, 3, 2, 2)),
    lambda L, N: N.Linear(4, 3)(L.zeros(8, 5)),
    lambda L, N: N.BatchNorm2d(3)(L.zeros(8, 3, 28)),
    lambda L, N: N.BatchNorm2d(3)(L.zeros(8, 4, 2, 2)),
    lambda L, N: N.LayerNorm(4)(L.zeros(2, 3)),
    lambda L, N: N.MaxPool2d(3, padding=2)(L.zeros(1, 1, 4, 4)),
    lambda L, N: N.MaxPool2d(3)(L.zeros(1, 1, 2, 2)),
    lambda L, N: N.CrossEntropyLoss()(L.zeros(8, 4), L.full((8,), 5)),
    lambda L, N: N.CrossEntropyLoss()(L.zeros(8, 4), L.full((7,), 1)),
    lambda L, N: N.Dropout(1.5),
    lambda L, N: N.Conv2d(3, 16, 3, groups=2),
    lambda L, N: N.Sequential(N.ReLU())[3],
])
def test_errors_match_pytorchs_type_and_text(program):
    ttype, tmsg = _message(lambda: program(torch, torch.nn))
    gtype, gmsg = _message(lambda: program(gl, nn))
    assert gtype == ttype
    # gradlog may add the values at hand after PyTorch's text
    stem = tmsg.rstrip(".").replace("torch.", "gradlog.")
    assert gmsg.startswith(stem) or gmsg.startswith(stem.split(" (")[0]), (gmsg, tmsg)
