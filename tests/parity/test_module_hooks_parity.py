"""Module hooks against PyTorch: the programs of the parity spec (cases 19-35) and the issue's
scenarios, each run in both libraries with the same observations compared."""

import warnings

import pytest
from dual import assert_same, raised

torch = pytest.importorskip("torch")


def _module_classes(L):
    nn = L.nn

    class Add(nn.Module):
        def forward(self, a, b):
            return a + b

    class Id(nn.Module):
        def forward(self, x):
            return x

    class Scale(nn.Module):
        def forward(self, x, scale=1.0):
            return x * scale

    class Boom(nn.Module):
        def forward(self, x):
            raise ValueError("boom")

    class ModelW(nn.Module):
        def __init__(self):
            super().__init__()
            self.W = nn.Parameter(L.tensor([5.0]))

        def forward(self, x1, x2):
            return x1 * x2 * self.W

    class M3(nn.Module):
        def forward(self, a, b, k):
            return a * b * k

    class Mul3(nn.Module):
        def forward(self, a):
            return a * 3

    class Two(nn.Module):
        def forward(self, x):
            return x * 2, x * 3

    class TwoTagged(nn.Module):
        def forward(self, x):
            return x * 2, x * 3, "tag"

    class Lin(nn.Module):
        def __init__(self, w):
            super().__init__()
            self.w = nn.Parameter(L.tensor([w]))

        def forward(self, x):
            return x * self.w

    class Inner(nn.Module):
        def forward(self, x):
            return x * 2

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.i1, self.i2 = Inner(), Inner()

        def forward(self, x):
            return self.i2(self.i1(x))

    return locals()


def add_module_captures(L, log):  # case 19 and the Add scenario
    m = _module_classes(L)["Add"]()
    m.register_forward_pre_hook(lambda mod, args: log.append(("pre", len(args), *args)))
    m.register_forward_hook(lambda mod, args, out: log.append(("fwd", out)))
    log.append(m(L.tensor([1.0, 2.0]), L.tensor([10.0, 20.0])))


def pre_hook_return_is_wrapped(L, log):  # case 20
    m = _module_classes(L)["Id"]()
    m.register_forward_pre_hook(lambda mod, args: args[0] + 100)
    log.append(m(L.tensor([1.0])))


def prepend_order(L, log):  # case 21
    m = _module_classes(L)["Id"]()
    for name, prepend in (("A", False), ("B", True), ("C", False), ("D", True)):
        m.register_forward_hook(lambda mod, a, o, n=name: log.append(n), prepend=prepend)
    m(L.tensor([1.0]))


def kwargs_hooks(L, log):  # case 22
    s = _module_classes(L)["Scale"]()

    def pre(mod, args, kwargs):
        return args, {**kwargs, "scale": kwargs["scale"] * 2}
    s.register_forward_pre_hook(pre, with_kwargs=True)
    s.register_forward_hook(lambda mod, a, kw, o: log.append((len(a), kw)), with_kwargs=True)
    s.register_forward_hook(lambda mod, a, o: log.append(("plain", len(a))))
    log.append(s(L.tensor([1.0]), scale=3.0))
    bad = _module_classes(L)["Scale"]()
    bad.register_forward_pre_hook(lambda mod, a, kw: (L.tensor([1.0]), L.tensor([2.0]),
                                                     L.tensor([3.0])), with_kwargs=True)
    log.append(raised(lambda: bad(L.tensor([1.0])), n=80))


def always_call(L, log):  # case 23
    m = _module_classes(L)["Boom"]()
    m.register_forward_hook(lambda mod, a, o: log.append(("always", o)), always_call=True)
    m.register_forward_hook(lambda mod, a, o: log.append("normal"))
    log.append(raised(lambda: m(L.tensor([1.0]))))


def globals_before_locals(L, log):  # case 24
    module = L.nn.modules.module
    m = _module_classes(L)["Id"]()
    handles = [
        m.register_forward_pre_hook(lambda *a: log.append("local_pre"), prepend=True),
        module.register_module_forward_pre_hook(lambda *a: log.append("global_pre")),
        m.register_forward_hook(lambda *a: log.append("local_fwd"), prepend=True),
        module.register_module_forward_hook(lambda *a: log.append("global_fwd")),
    ]
    try:
        m(L.tensor([1.0]))
    finally:
        for h in handles:
            h.remove()


def snapshot_iteration(L, log):  # case 25
    m = _module_classes(L)["Id"]()
    later = []

    def adder(mod, a, o):
        log.append("adder")
        later.append(mod.register_forward_hook(lambda *x: log.append("added")))

    m.register_forward_hook(adder)
    handles = {}

    def remover(mod, a, o):
        log.append("remover")
        handles["victim"].remove()

    m.register_forward_hook(remover)
    handles["victim"] = m.register_forward_hook(lambda *x: log.append("victim"))
    m(L.tensor([1.0]))
    log.append("second call")
    for h in later:
        h.remove()
    m(L.tensor([1.0]))


def model_w(L, log):  # case 26, the W = [5] scenario
    m = _module_classes(L)["ModelW"]()
    m.register_full_backward_hook(lambda mod, gi, go: log.append(("bw", gi, go)))
    x1 = L.tensor([2.0], requires_grad=True)
    x2 = L.tensor([3.0], requires_grad=True)
    out = m(x1, x2)
    out.retain_grad()
    out.backward()
    log += [x1.grad, x2.grad, out.grad, m.W.grad, out]


def none_vs_zeros(L, log):  # case 27
    m = _module_classes(L)["M3"]()
    m.register_full_backward_hook(lambda mod, gi, go: log.append((gi, go)))
    a = L.tensor([2.0], requires_grad=True)
    m(a, L.tensor([3.0]), 4.0).backward()


def backward_pre_hook_scales(L, log):  # case 28
    m = _module_classes(L)["Mul3"]()
    m.register_full_backward_pre_hook(lambda mod, go: (log.append(("pre", go)),
                                                       (go[0] * 10,))[1])
    m.register_full_backward_hook(lambda mod, gi, go: log.append(("full", gi, go)))
    a = L.tensor([2.0], requires_grad=True)
    m(a).backward()
    log.append(a.grad)


def replace_grad_input(L, log):  # case 29
    m = _module_classes(L)["Mul3"]()
    m.register_full_backward_hook(lambda mod, gi, go: (L.full_like(gi[0], 7.0),))
    a = L.tensor([2.0], requires_grad=True)
    m(a).backward()
    log.append(a.grad)


def wrong_lengths(L, log):  # case 30
    m = _module_classes(L)["Mul3"]()
    m.register_full_backward_hook(lambda mod, gi, go: (gi[0], gi[0]))
    a = L.tensor([2.0], requires_grad=True)
    log.append(raised(lambda: m(a).backward()))
    p = _module_classes(L)["Mul3"]()
    p.register_full_backward_pre_hook(lambda mod, go: (go[0], go[0]))
    b = L.tensor([2.0], requires_grad=True)
    log.append(raised(lambda: p(b).backward()))


def no_input_requires_grad(L, log):  # case 31
    m = _module_classes(L)["Lin"](1.0)
    m.register_full_backward_hook(lambda mod, gi, go: log.append((gi, go)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m(L.tensor([3.0])).backward()
    log.append(any("Full backward hook is firing when gradients are computed with respect to "
                   "module outputs" in str(w.message) for w in caught))
    log.append(m.w.grad)
    bad = _module_classes(L)["Lin"](1.0)
    bad.register_full_backward_hook(lambda mod, gi, go: (L.tensor([1.0]),))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        log.append(raised(lambda: bad(L.tensor([3.0])).backward()))


def multiple_outputs(L, log):  # case 32
    m = _module_classes(L)["Two"]()
    m.register_full_backward_hook(lambda mod, gi, go: log.append((gi, go)))
    x = L.tensor([1.0], requires_grad=True)
    a, b = m(x)
    (a * a + 5 * b + a).backward()
    log.append(x.grad)
    t = _module_classes(L)["TwoTagged"]()
    t.register_full_backward_hook(lambda mod, gi, go: log.append((gi, go)))
    y = L.tensor([1.0], requires_grad=True)
    first, _, tag = t(y)
    (first * 10).backward()
    log.append(tag)


def nested_order(L, log):  # case 33
    o = _module_classes(L)["Outer"]()
    for name, mod in (("outer", o), ("i1", o.i1), ("i2", o.i2)):
        mod.register_forward_pre_hook(lambda m, a, n=name: log.append("fpre:" + n))
        mod.register_forward_hook(lambda m, a, out, n=name: log.append("fwd:" + n))
        mod.register_full_backward_pre_hook(lambda m, go, n=name: log.append("bpre:" + n))
        mod.register_full_backward_hook(lambda m, gi, go, n=name: log.append("bwd:" + n))
    o(L.tensor([1.0], requires_grad=True)).backward()


def hooks_under_no_grad_and_twice_in_a_graph(L, log):  # case 34
    m = _module_classes(L)["Mul3"]()
    m.register_forward_hook(lambda mod, a, o: log.append("fwd"))
    m.register_full_backward_hook(lambda mod, gi, go: log.append("bwd"))
    a = L.tensor([2.0], requires_grad=True)
    with L.no_grad():
        out = m(a)
    log.append(out.requires_grad)
    lin = _module_classes(L)["Lin"](2.0)
    lin.register_full_backward_hook(lambda mod, gi, go: log.append((gi, go)))
    x = L.tensor([1.0], requires_grad=True)
    lin(lin(x)).backward()


def conv_forward_hook_shapes_then_removed(L, log):  # the Conv2d scenario
    L.manual_seed(0)
    conv = L.nn.Conv2d(3, 16, 3, padding=1)
    h = conv.register_forward_hook(
        lambda mod, args, out: log.append((tuple(args[0].shape), tuple(out.shape))))
    conv(L.zeros(2, 3, 8, 8))
    h.remove()
    conv(L.zeros(1, 3, 4, 4))
    log.append(len(conv._forward_hooks))


PROGRAMS = [add_module_captures, pre_hook_return_is_wrapped, prepend_order, kwargs_hooks,
            always_call, globals_before_locals, snapshot_iteration, model_w, none_vs_zeros,
            backward_pre_hook_scales, replace_grad_input, wrong_lengths, no_input_requires_grad,
            multiple_outputs, nested_order, hooks_under_no_grad_and_twice_in_a_graph,
            conv_forward_hook_shapes_then_removed]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_module_hooks_match_pytorch(program):
    assert_same(program)


def test_inplace_on_a_hooked_output_is_a_documented_difference():
    """Case 35: PyTorch refuses an in-place op on a hooked module's output at forward time;
    gradlog allows it and gives the right gradients (docs/differences.md)."""
    import gradlog as gl

    m = _module_classes(gl)["Mul3"]()
    seen = []
    m.register_full_backward_hook(lambda mod, gi, go: seen.append((gi[0].item(),
                                                                   go[0].item())))
    a = gl.tensor([2.0], requires_grad=True)
    out = m(a)
    out.mul_(2)
    out.backward()
    assert a.grad.item() == 6.0 and seen == [(6.0, 2.0)]
    t = _module_classes(torch)["Mul3"]()
    t.register_full_backward_hook(lambda mod, gi, go: None)
    with pytest.raises(RuntimeError, match="Output 0 of BackwardHookFunction is a view"):
        t(torch.tensor([2.0], requires_grad=True)).mul_(2)


@pytest.mark.filterwarnings("ignore:Full backward hook is firing")  # the first Linear's input
def test_relu_inplace_inside_a_hooked_model_works_and_matches_the_unhooked_gradient():
    import gradlog as gl
    from gradlog import nn

    def grads(hooked):
        gl.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(inplace=True), nn.Linear(8, 2))
        if hooked:
            for m in model.modules():
                m.register_full_backward_hook(lambda mod, gi, go: None)
        x = gl.randn(3, 4, generator=gl.Generator().manual_seed(1))
        model(x).sum().backward()
        return [p.grad.numpy().copy() for p in model.parameters()]

    for a, b in zip(grads(False), grads(True)):
        assert (a == b).all()
