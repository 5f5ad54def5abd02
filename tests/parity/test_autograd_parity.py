"""The autograd core against PyTorch: accumulation, backward/grad arguments and errors, grad
modes, in-place ops and version counters, autograd.Function and anomaly mode (parity spec,
cases 36-40, and the behaviours around them)."""

import threading
import warnings

import pytest
from dual import assert_same, raised

torch = pytest.importorskip("torch")

# PyTorch never warns about 0 * inf or 1 / 0: numpy's warnings must not leak from gradlog
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")


def t(L, data, **kw):
    return L.tensor(data, **kw)


# -- accumulation, retain_graph, backward arguments -------------------------------------------

def accumulation(L, log):
    x = t(L, 2.0, requires_grad=True)
    for _ in range(3):
        (x ** 2).backward()
        log.append(x.grad)
    for _ in range(3):
        x.grad = None
        (x ** 2 + x).backward()
        log.append(x.grad)


def retain_graph(L, log):
    x = t(L, 2.0, requires_grad=True)
    y = x ** 3
    y.backward(retain_graph=True)
    log.append(x.grad)
    x.grad = None
    y.backward()
    log.append(x.grad)
    log.append(raised(y.backward))
    x.grad = None
    z = x ** 3
    z.backward(retain_graph=True)
    z.backward()
    log.append(x.grad)
    w = x * x
    w.backward()
    log.append(raised(w.backward))


def second_backward_without_saved_tensors(L, log):
    x = t(L, 1.0, requires_grad=True)
    y = x + x
    y.backward()
    y.backward()
    log.append(x.grad)


def backward_arguments_and_errors(L, log):
    x = t(L, [1.0, 2.0], requires_grad=True)
    log.append(raised(lambda: (x * 2).backward()))
    (x * 2).backward(t(L, [1.0, 10.0]))
    log.append(x.grad)
    log.append(raised(lambda: (x * 2).backward(t(L, [1.0, 2.0, 3.0])), n=50))
    log.append(raised(lambda: t(L, [1.0]).sum().backward()))
    log.append(raised(lambda: L.autograd.grad((x * 2), x)))


def backward_inputs(L, log):
    a = t(L, 3.0, requires_grad=True)
    b = t(L, 2.0, requires_grad=True)
    (a * b).backward(inputs=[a])
    log += [a.grad, b.grad]
    y = a * 4
    (y * b).backward(inputs=[y, b])
    log += [y.grad, b.grad, a.grad]
    log.append(raised(lambda: (a * b).backward(inputs=[])))


def create_graph_higher_order(L, log):
    x = t(L, 2.0, requires_grad=True)
    y = x ** 3
    (g,) = L.autograd.grad(y, x, create_graph=True)
    log += [g, g.requires_grad, type(g.grad_fn).__name__ if L is torch else g.grad_fn.name()]
    log.append(L.autograd.grad(g, x))
    z = x ** 3
    with warnings.catch_warnings(record=True):  # PyTorch warns once per process: not compared
        warnings.simplefilter("always")
        z.backward(create_graph=True)
    log += [x.grad, x.grad.requires_grad]
    gx = x.grad
    x.grad = None
    gx.backward()
    log.append(x.grad)


def gradient_penalty(L, log):
    w = t(L, [[0.5, -1.0], [2.0, 0.3]], requires_grad=True)
    x = t(L, [[1.0, 2.0], [-1.0, 0.5], [0.2, 0.1]], requires_grad=True)
    out = (x @ w).tanh().sum()
    (gx,) = L.autograd.grad(out, x, create_graph=True)
    penalty = (gx.norm(dim=1) - 1).pow(2).mean()
    penalty.backward()
    log += [penalty, w.grad, x.grad]


def autograd_grad_variants(L, log):
    x = t(L, 2.0, requires_grad=True)
    z = t(L, 1.0, requires_grad=True)
    log.append(raised(lambda: L.autograd.grad(x ** 2, [x, z])))
    log.append(L.autograd.grad(x ** 2, [x, z], allow_unused=True))
    log.append(x.grad)
    log.append(L.autograd.grad(x ** 2, [x, z], materialize_grads=True))
    log.append(raised(lambda: L.autograd.grad(x ** 2, [x, z], allow_unused=False,
                                              materialize_grads=True)))
    log.append(L.autograd.grad(x ** 2, {"x": x}))
    v = t(L, [1.0, 2.0], requires_grad=True)
    log.append(L.autograd.grad(v * 3, v, grad_outputs=t(L, [1.0, 10.0])))
    log.append(L.autograd.grad([v.sum(), (v * v).sum()], [v]))
    log.append(raised(lambda: L.autograd.grad(v.sum(), t(L, [1.0]))))
    y = v ** 2
    L.autograd.grad(y.sum(), v)
    log.append(raised(lambda: L.autograd.grad(y.sum(), v)))


def grad_of_intermediate(L, log):
    x = t(L, [1.0, 2.0], requires_grad=True)
    y = x * 3
    z = (y * y).sum()
    log.append(L.autograd.grad(z, [y, x]))
    log.append(x.grad)


def non_leaf_grad_warning(L, log):
    x = t(L, [1.0], requires_grad=True)
    y = x * 2
    y.backward()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        log.append(y.grad)
    log.append([str(w.message)[:120] for w in caught])
    log.append(len(caught))


def flags(L, log):
    x = t(L, [1.0, 2.0], requires_grad=True)
    y = x * 3
    log += [x.is_leaf, y.is_leaf, y.requires_grad, y.grad_fn is None]
    d = y.detach()
    log += [d.requires_grad, d.grad_fn is None, d.is_leaf]
    d[0] = -1
    log.append(y.detach())
    log.append(raised(lambda: y.requires_grad_(False)))
    log.append(y.requires_grad_(True) is y)
    log.append(raised(lambda: t(L, [1, 2]).requires_grad_()))
    log.append(raised(lambda: setattr(x, "grad", t(L, [1.0, 2.0, 3.0]))))
    e = x * 1
    e.detach_()
    log += [e.requires_grad, e.is_leaf, e.grad_fn is None]


def special_values(L, log):
    c = L.tensor([True, False])
    log += [L.where(c, 1.0, 0.0), L.where(c, 1, 0), L.where(c, True, False)]
    a = t(L, [0.0, 2.0, 0.0], requires_grad=True)
    b = t(L, [0.0, 1.0, 0.5], requires_grad=True)
    (a ** b).sum().backward()
    log += [a.grad, b.grad]
    for p in (0.0, 0.5, 2.0):
        x = t(L, [0.0, 4.0], requires_grad=True)
        (x ** p).sum().backward()
        log.append(x.grad)
    for reduce in (lambda v: v.max(), lambda v: v.min(), lambda v: v.amax()):
        x = t(L, [1.0, float("nan"), 3.0], requires_grad=True)
        m = reduce(x)
        m.backward()
        log += [m, x.grad]
    x = t(L, [[1.0, float("nan")], [3.0, 2.0]], requires_grad=True)
    m = x.amax(1)
    m.sum().backward()
    log += [m, x.grad]
    x = t(L, [-float("inf"), 0.0], requires_grad=True)
    y = x.log_softmax(0)
    y.sum().backward()
    log += [y, x.grad]
    x = t(L, [0.0, 0.0], requires_grad=True)
    log += [x.norm(), L.autograd.grad(x.norm(), x), L.autograd.grad(x.sqrt().sum(), x)]
    x = t(L, [0.5, 1.5, 2.5, -0.5, -1.5])
    log += [x.round(), L.round(x * 10, decimals=-1)]
    i = L.tensor([-7, 7])
    log += [i // 2, i % 3, L.div(i, 2, rounding_mode="trunc"), i / 2]
    f = t(L, [-7.0, 7.0])
    log += [f // 2, f % -3, L.div(f, 2, rounding_mode="trunc"),
            L.div(f, 2, rounding_mode="floor")]
    log.append(t(L, [1.0, 2.0, 3.0]).clamp(2.5, 1.5))
    n = L.tensor([1, 2, 3])
    log += [n * 2, n + True, -n, n.abs(), n.sum(), n.max(), n.cumsum(0), n.prod()]
    bb = L.tensor([True, False])
    log += [bb + bb, bb * 3, bb.sum(), ~bb, bb & bb, bb | ~bb]
    m = L.arange(6).reshape(2, 3)
    log.append(m @ m.t())


# -- grad modes -------------------------------------------------------------------------------

def grad_modes(L, log):
    x = t(L, [1.0], requires_grad=True)
    with L.no_grad():
        y = x * 2
        log += [y.requires_grad, y.grad_fn is None, y.is_leaf, L.is_grad_enabled()]
        log.append(L.zeros(1, requires_grad=True).requires_grad)
        with L.enable_grad():
            log += [L.is_grad_enabled(), (x * 2).requires_grad]
    with L.set_grad_enabled(False):
        log.append(L.is_grad_enabled())
    log.append(L.is_grad_enabled())
    L.set_grad_enabled(False)
    log.append(L.is_grad_enabled())
    L.set_grad_enabled(True)
    log.append(L.is_grad_enabled())

    @L.no_grad()
    def called():
        return L.is_grad_enabled()

    @L.no_grad
    def bare():
        return L.is_grad_enabled()

    @L.enable_grad()
    def enabled():
        return L.is_grad_enabled()

    @L.set_grad_enabled(False)
    def disabled():
        return L.is_grad_enabled()

    log += [called(), bare(), disabled(), L.is_grad_enabled()]
    with L.no_grad():
        log.append(enabled())


def grad_mode_on_generators(L, log):
    @L.no_grad()
    def gen():
        for i in range(2):
            log.append(("inside", i, L.is_grad_enabled()))
            yield i

    for i in gen():
        log.append(("caller", i, L.is_grad_enabled()))


def grad_mode_is_thread_local(L, log):
    seen = []
    with L.no_grad():
        th = threading.Thread(target=lambda: seen.append(L.is_grad_enabled()))
        th.start()
        th.join()
        log.append(L.is_grad_enabled())
    log.append(seen)


def inplace_on_leaf_under_no_grad(L, log):
    w = t(L, [1.0, 2.0], requires_grad=True)
    with L.no_grad():
        w -= 0.1
        w.mul_(2)
    log += [w.detach(), w.is_leaf, w.requires_grad, w.grad_fn is None]


def inference_mode(L, log):
    x = t(L, [1.0], requires_grad=True)
    with L.inference_mode():
        y = x * 2
        log += [y.requires_grad, y.is_inference(), L.is_grad_enabled(),
                L.is_inference_mode_enabled()]
        with L.inference_mode(False):
            log.append(L.is_inference_mode_enabled())
    log.append(L.is_inference_mode_enabled())
    log.append(raised(lambda: x * y, n=60))
    log.append(raised(lambda: y.add_(1), n=60))
    log.append((x + y).requires_grad)
    log.append(y.clone().is_inference())

    @L.inference_mode()
    def f():
        return L.is_grad_enabled()

    log.append(f())


# -- in-place ops and version counters ---------------------------------------------------------

def leaf_inplace_errors(L, log):
    x = t(L, [1.0, 2.0], requires_grad=True)
    log.append(raised(lambda: x.add_(1)))
    log.append(raised(lambda: x[0].mul_(2)))
    log.append(raised(lambda: x.zero_()))
    log.append(raised(lambda: x.__setitem__(slice(1, None), 0)))
    log.append(raised(lambda: x.__setitem__(0, 0)))
    log.append(raised(lambda: x.__setitem__([0], 0)))
    log.append(raised(lambda: x.__setitem__(x > 1, 0)))
    log.append(x)


def version_counters(L, log):
    x = t(L, [1.0, 2.0, 3.0])
    v = x[1:]
    r = x.view(3, 1)
    log.append(x._version)
    v.add_(1)
    log += [x._version, v._version, r._version, x]
    x.mul_(2)
    r.zero_()
    x.fill_(5)
    x.copy_(t(L, [1.0, 2.0, 3.0]))
    x.clamp_(min=2.0)
    x.sub_(1)
    x.div_(2)
    x[0] = 7
    log += [x._version, v._version, x, x.detach()._version]


def modified_by_inplace_error(L, log):
    a = t(L, [1.0, 2.0], requires_grad=True)
    y = a.exp()
    y.add_(1)
    log.append(raised(lambda: y.sum().backward(), n=180))
    b = t(L, [1.0, 2.0], requires_grad=True)
    c = b * 1
    d = c * b
    c.add_(1)
    log.append(raised(lambda: d.sum().backward(), n=180))
    e = t(L, [1.0, 2.0], requires_grad=True)
    f = e.exp()
    f.detach()[0] = 0
    log.append(raised(lambda: f.sum().backward(), n=180))


def inplace_graph(L, log):
    x = t(L, [1.0, -2.0, 3.0], requires_grad=True)
    y = x * 2
    y.mul_(x)
    y.add_(x, alpha=3)
    y.clamp_(max=10.0)
    y.sub_(1).div_(2)
    log += [y, type(y.grad_fn).__name__ if L is torch else y.grad_fn.name()]
    y.sum().backward()
    log.append(x.grad)


def saved_output_modified_later(L, log):
    x = t(L, [1.0, 2.0], requires_grad=True)
    y = x * 2
    y.exp_()  # ExpBackward0 saves its output: y itself
    z = y * 1
    log.append(raised(lambda: z.sum().backward(), n=150))
    y.add_(1)
    log.append(raised(lambda: z.sum().backward(), n=150))


def inplace_on_view_updates_base(L, log):
    x = t(L, [1.0, 2.0, 3.0, 4.0], requires_grad=True)
    y = x * 1
    v = y[1:3]
    v.mul_(10)
    log.append(y)
    (y * t(L, [1.0, 2.0, 3.0, 4.0])).sum().backward()
    log.append(x.grad)
    a = t(L, [[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    b = a.clone()
    b.t()[0].add_(a[0])  # column 0 of b, through a transposed view
    b.sum().backward()
    log += [b, a.grad]


def index_assignment_with_gradient(L, log):
    x = t(L, [-1.0, 2.0, -3.0, 4.0], requires_grad=True)
    y = x * 2
    y[y < 0] = 0
    log.append(y)
    y.sum().backward()
    log.append(x.grad)
    v = t(L, [5.0, 6.0], requires_grad=True)
    z = t(L, [1.0, 1.0, 1.0, 1.0], requires_grad=True) * 1
    z[[0, 3]] = v * v
    (z * t(L, [1.0, 2.0, 3.0, 4.0])).sum().backward()
    log.append(v.grad)
    w = t(L, [1.0, 2.0, 3.0], requires_grad=True)
    w[[0, 0, 2]].sum().backward()
    log.append(w.grad)


def inplace_on_tensor_without_grad_using_grad_value(L, log):
    x = t(L, [1.0, 2.0], requires_grad=True)
    buf = L.zeros(2)
    buf.add_(x * 3)
    log += [buf.requires_grad, buf.is_leaf]
    buf.sum().backward()
    log.append(x.grad)


# -- autograd.Function and anomaly mode -------------------------------------------------------

def custom_function(L, log):
    class Cube(L.autograd.Function):
        @staticmethod
        def forward(ctx, x, scale, flag):
            log.append(("needs", ctx.needs_input_grad))
            ctx.save_for_backward(x)
            ctx.scale = scale
            return x ** 3 * scale

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            log.append(("needs in backward", ctx.needs_input_grad))
            return g * 3 * x ** 2 * ctx.scale, None, None

    x = t(L, 2.0, requires_grad=True)
    y = Cube.apply(x, 1.0, True)
    log += [y, type(y.grad_fn).__name__ if L is torch else y.grad_fn.name()]
    y.backward()
    log.append(x.grad)
    with L.no_grad():
        log.append(Cube.apply(x, 2.0, False).requires_grad)


def custom_function_errors(L, log):
    class Bad(L.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g, g

    class Bad2(L.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return L.ones(3)

    class Broadcast(L.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return L.ones(4, 2)

    x = t(L, [1.0, 2.0], requires_grad=True)
    log.append(raised(lambda: Bad.apply(x).sum().backward()))
    log.append(raised(lambda: Bad2.apply(x).sum().backward()))
    Broadcast.apply(x).sum().backward()
    log.append(x.grad)


def custom_function_non_differentiable_and_saved_version(L, log):
    class SortLike(L.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            idx = L.tensor([1.0, 0.0])
            ctx.mark_non_differentiable(idx)
            ctx.save_for_backward(x)
            return x * 2, idx

        @staticmethod
        def backward(ctx, g, g_idx):
            log.append(("g_idx", g_idx))
            (x,) = ctx.saved_tensors
            return g * 2

    x = t(L, [1.0, 2.0], requires_grad=True)
    out, idx = SortLike.apply(x)
    log += [out.requires_grad, idx.requires_grad]
    out.sum().backward()
    log.append(x.grad)
    y = x * 1
    out2, _ = SortLike.apply(y)
    with L.no_grad():
        y.add_(1)
    log.append(raised(lambda: out2.sum().backward(), n=100))


def anomaly(L, log):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with L.autograd.detect_anomaly():
            log.append(L.is_anomaly_enabled())
            x = t(L, [-1.0], requires_grad=True)
            log.append(raised(lambda: (L.sqrt(x) * 0).sum().backward()))
        log.append(L.is_anomaly_enabled())
    messages = [str(w.message) for w in caught]
    log.append(messages[0])
    log.append(any(m.startswith("Error detected in SqrtBackward0") for m in messages))
    with warnings.catch_warnings(record=True), L.autograd.detect_anomaly(check_nan=False):
        x = t(L, [-1.0], requires_grad=True)
        (L.sqrt(x) * 0).sum().backward()
        log.append(x.grad)
    L.autograd.set_detect_anomaly(True)
    log.append(L.is_anomaly_enabled())
    L.autograd.set_detect_anomaly(False)
    log.append(L.is_anomaly_enabled())


PROGRAMS = [
    accumulation, retain_graph, second_backward_without_saved_tensors,
    backward_arguments_and_errors, backward_inputs, create_graph_higher_order, gradient_penalty,
    autograd_grad_variants, grad_of_intermediate, special_values, non_leaf_grad_warning, flags,
    grad_modes,
    grad_mode_on_generators, grad_mode_is_thread_local, inplace_on_leaf_under_no_grad,
    inference_mode, leaf_inplace_errors, version_counters, modified_by_inplace_error,
    inplace_graph, saved_output_modified_later, inplace_on_view_updates_base,
    index_assignment_with_gradient, inplace_on_tensor_without_grad_using_grad_value,
    custom_function, custom_function_errors,
    custom_function_non_differentiable_and_saved_version, anomaly,
]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_same_observations_as_pytorch(program):
    assert_same(program)
