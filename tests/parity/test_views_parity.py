"""Views, multi-output ops, inference mode and grad-mode decorators against PyTorch: hooks on
a view across an in-place op, regenerated views, detach_ on views, hooks on one output of
unbind/split/chunk, inference tensors, and decorating classes."""

import warnings

import pytest
from dual import assert_same, raised

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")


def t(L, data, **kw):
    return L.tensor(data, **kw)


# -- views and in-place ops ------------------------------------------------------------------

def hooks_on_a_view_stop_at_its_inplace_op(L, log):
    x = t(L, [1.0, 2.0, 3.0], requires_grad=True)
    y = x * 1
    v = y[:2]
    v.register_hook(lambda g: log.append(("before", g)))
    v.mul_(2)
    v.register_hook(lambda g: log.append(("after", g)))
    (v * 3).sum().backward()
    log.append(x.grad)


def hooks_on_the_base_of_a_view_changed_in_place(L, log):
    x = t(L, [1.0, 2.0, 3.0], requires_grad=True)
    y = x * 1
    v = y[:2]
    y.register_hook(lambda g: log.append(("before", g)))
    v.mul_(2)
    y.register_hook(lambda g: log.append(("after", g)))
    (y * 3).sum().backward()
    log.append(x.grad)


def sibling_views_see_an_inplace_change(L, log):
    x = t(L, [1.0, 2.0, 3.0], requires_grad=True)
    y = x * 1
    v1, v2 = y[:2], y[1:]
    v1.mul_(2)
    (v2 * 1).sum().backward()
    log.append(x.grad)
    x.grad = None
    z = x * 1
    w = z[1:]
    z.mul_(3)
    (w * w).sum().backward()
    log += [x.grad, w]


def detach_inplace_refused_on_views(L, log):
    x = t(L, [1.0, 2.0, 3.0], requires_grad=True)
    log.append(raised(lambda: (x * 1)[:2].detach_(), n=50))
    log.append(raised(lambda: x.detach()[:2].detach_(), n=50))
    log.append(raised(lambda: x.view(3).detach_(), n=50))
    y = x * 2
    log += [y.detach_() is y, y.requires_grad, y.grad_fn]


def multi_output_hooks_get_none_for_a_sibling(L, log):
    x = t(L, [1.0, 2.0, 3.0, 4.0], requires_grad=True)
    a, b, c, d = x.unbind()
    log.append((a.grad_fn is b.grad_fn, a.grad_fn.name(), b.output_nr))
    a.register_hook(lambda g: log.append(("a", g)))
    c.register_hook(lambda g: log.append(("c", g)))
    (b * 2).backward()
    s0, s1 = x.split(2)
    s0.register_hook(lambda g: log.append(("s0", g)))
    (s1 * 3).sum().backward()
    c0, c1 = x.chunk(2)
    c1.register_hook(lambda g: log.append(("c1", g)))
    (c0 * 4).sum().backward()
    log.append(x.grad)


def multi_output_views_refuse_inplace_changes(L, log):
    x = t(L, [1.0, 2.0, 3.0], requires_grad=True)
    a, b, c = (x * 1).unbind()
    log.append(raised(lambda: a.mul_(2), n=70))
    y = x * 1
    s0, s1 = y.split(2)
    with L.no_grad():
        y.mul_(2)
    log.append(raised(lambda: s0.grad_fn, n=70))
    log.append(raised(lambda: s1 * 1, n=70))


def retained_grads_survive_inplace_changes_of_views(L, log):
    base = L.tensor([1.0, 2.0, 3.0], requires_grad=True)
    view = base.clone()[:]
    view.retain_grad()
    view.mul_(2)  # the view itself changed in place
    (view * 3).sum().backward()
    log += [view.grad, base.grad, view.retains_grad]
    b = L.tensor([1.0, 2.0], requires_grad=True)
    c = b * 1
    v = c[1:]
    v.retain_grad()
    c.mul_(4)  # its base changed in place: the view's node is regenerated
    (v * 2).sum().backward()
    log += [v.grad, b.grad, v.retains_grad]
    c2 = b * 1
    v2 = c2[:1]
    c2.retain_grad()
    v2.retain_grad()
    v2.mul_(5)  # a view of a tensor that retains its grad
    (c2 * L.tensor([1.0, 10.0])).sum().backward()
    log += [c2.grad, v2.grad]
    t = (b * 1).reshape(1, 2)
    t.retain_grad()
    t.t_()  # an in-place view op
    (t * L.tensor([[3.0], [4.0]])).sum().backward()
    log += [t.grad, b.grad]


# -- inference mode --------------------------------------------------------------------------

def inference_tensors(L, log):
    x = t(L, [1.0, 2.0], requires_grad=True)
    n = L.ones(2)
    with L.inference_mode():
        made = [L.ones(2), t(L, [1.0]), L.arange(3), L.randn(2), x * 2, x > 0, x.argmax(),
                x.clone(), x[[0]]]
        log.append([m.is_inference() for m in made])
        views = [n.view(2), n[:1], x.view(2), x.detach(), x[0]]
        log.append([(v.is_inference(), v.requires_grad, v.grad_fn is None) for v in views])
        log.append(L.is_inference(made[0]))
        inner = L.ones(2)
        inner.add_(1)  # allowed inside
        n.add_(1)  # a normal tensor may be changed inside, too
    log.append(raised(lambda: made[0].add_(1)))
    log.append(raised(lambda: made[0].zero_()))
    log.append(raised(lambda: (x * made[0]).sum().backward(), n=60))
    log.append([inner, n, L.is_inference(n)])


def views_made_in_inference_mode_of_a_tensor_changed_later(L, log):
    x = t(L, [1.0, 2.0], requires_grad=True)
    y = x * 2
    n = L.ones(2)
    with L.inference_mode():
        v = y.view(2)
        w = n[:1]
        u = x.view(2)
    log.append((v.requires_grad, v.is_leaf, v.is_inference()))
    with L.no_grad():
        y.add_(1)
        x.add_(1)
    n.add_(1)
    log.append(raised(lambda: v.grad_fn, n=60))
    log.append(raised(lambda: u * 2, n=60))
    log.append(w.grad_fn)


def a_view_made_in_inference_mode_changed_in_place_outside(L, log):
    x = t(L, [1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2
    n = L.ones(3)
    with L.inference_mode():
        w, z, v, v2 = y[:2], x[:2], n[:2], n[1:]
    log.append([u._is_view() for u in (w, z, v, y, n, x.detach())])
    log.append(raised(lambda: w.mul_(2)))
    log.append(raised(lambda: z.mul_(2)))  # (PyTorch's inference-view error comes first)
    log.append(raised(lambda: v.mul_(x[:2])))  # its other input requires grad
    log.append(raised(lambda: v2.copy_(y[1:])))
    v.add_(1)  # nothing to track: allowed
    with L.no_grad():
        w.mul_(10)  # untracked: allowed
    log += [v, n, w.detach(), y.detach()]
    with L.inference_mode():
        w.mul_(2)  # inside the mode: allowed
    log.append(y.detach())


def inference_tensors_in_normal_mode(L, log):
    with L.inference_mode():
        i = L.ones(3)
        iv = i[:2]
    views = [i.view(3), i[:2], i.unsqueeze(0), i.t(), i.expand(2, 3), i.detach(), iv]
    log.append([(u.is_inference(), u._is_view()) for u in views])
    log.append([(i * 2).is_inference(), i.clone().is_inference(), (i + 0).is_inference()])
    # (PyTorch writes some of these before it raises; gradlog refuses before writing)
    log.append(raised(lambda: i.view(3).mul_(2)))
    log.append(raised(lambda: iv.add_(1)))
    log.append(raised(lambda: i[0].fill_(2)))
    log.append(raised(lambda: i.requires_grad_()))
    i.requires_grad_(False)  # allowed
    with L.inference_mode():
        j = L.ones(3)
        j.view(3).mul_(2)  # inside: allowed
    log.append(j)
    x = t(L, [1.0, 2.0, 3.0], requires_grad=True)
    log.append(raised(lambda: x * i.view(3), n=60))
    (x + i.view(3)).sum().backward()  # nothing saved: allowed
    log.append(x.grad)


# -- grad-mode decorators --------------------------------------------------------------------

def decorating_a_class_warns(L, log):
    for mode in (L.no_grad(), L.enable_grad(), L.set_grad_enabled(False), L.inference_mode()):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")

            @mode
            class Thing:
                def __init__(self, v):
                    self.grad = L.is_grad_enabled()
                    self.v = v
        log.append([(w.category.__name__, str(w.message)[:40]) for w in caught])
        made = Thing(3)
        log += [isinstance(Thing, type), made.v, made.grad]
    log.append(L.is_grad_enabled())


PROGRAMS = [
    hooks_on_a_view_stop_at_its_inplace_op, hooks_on_the_base_of_a_view_changed_in_place,
    sibling_views_see_an_inplace_change, detach_inplace_refused_on_views,
    multi_output_hooks_get_none_for_a_sibling, multi_output_views_refuse_inplace_changes,
    retained_grads_survive_inplace_changes_of_views,
    inference_tensors, views_made_in_inference_mode_of_a_tensor_changed_later,
    a_view_made_in_inference_mode_changed_in_place_outside, inference_tensors_in_normal_mode,
    decorating_a_class_warns,
]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_same_observations_as_pytorch(program):
    assert_same(program)
