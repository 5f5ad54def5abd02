"""Tensor hooks, retain_grad and post-accumulate hooks against PyTorch (the programs of the
parity spec, cases 1-18, plus the ordering and edge cases around them)."""

import warnings

import pytest
from dual import assert_same, raised

torch = pytest.importorskip("torch")


def _hooks(L, t):
    """The tensor's hook registry (``_backward_hooks`` in PyTorch, ``_hooks`` in gradlog)."""
    return t._backward_hooks if L is torch else t._hooks


def intermediate_grad(L, log):
    x = L.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: log.append(("y", g)))
    z = y.pow(3).sum()
    z.backward()
    log += [x.grad, z]


def norm_monitor(L, log):
    w = L.tensor([3.0, 4.0], requires_grad=True)
    w.register_hook(lambda g: log.append(g.norm().item()))
    (w * w).sum().backward()
    log.append(w.grad)


def scaling_hook_removed(L, log):
    x = L.tensor([1.0, 2.0], requires_grad=True)
    h = x.register_hook(lambda g: g * 0.5)
    (x * 4).sum().backward()
    log.append(x.grad)
    h.remove()
    x.grad = None
    (x * 4).sum().backward()
    log.append(x.grad)


def closures_save_to_dict(L, log):
    saved, order = {}, []

    def save(name):
        def hook(g):
            saved[name] = g.item()
            order.append(name)
        return hook

    a = L.tensor(2.0, requires_grad=True)
    b = a * 3
    c = b ** 2
    for name, t in (("b", b), ("c", c), ("a", a)):
        t.register_hook(save(name))
    c.backward()
    log += [saved, order, a.grad]


def zero_negative_via_clone(L, log):
    x = L.tensor([1.0, 1.0, 1.0], requires_grad=True)
    y = x * 1

    def clip(g):
        g = g.clone()
        g[g < 0] = 0
        return g

    y.register_hook(clip)
    (y * L.tensor([1.0, -2.0, 3.0])).sum().backward()
    log.append(x.grad)


def nan_detector(L, log):
    x = L.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2

    def check(g):
        if L.isnan(g).any():
            raise RuntimeError("NaN gradient detected")

    y.register_hook(check)
    log.append(raised(lambda: (y * L.tensor([1.0, float("nan")])).sum().backward()))
    log.append(x.grad)


def leaf_doubling(L, log):
    v = L.tensor([0.0, 0.0, 0.0], requires_grad=True)
    v.register_hook(lambda g: g * 2)
    v.backward(L.tensor([1.0, 2.0, 3.0]))
    log.append(v.grad)


def hook_chain(L, log):
    x = L.tensor([1.0], requires_grad=True)
    y = x * 3
    y.register_hook(lambda g: g + 1)
    y.register_hook(lambda g: g * 10)
    y.register_hook(lambda g: log.append(("seen", g)))
    y.register_hook(lambda g: None)
    x.register_hook(lambda g: log.append(("leaf", g)))
    y.backward()
    log.append(x.grad)


def retain_grad_then_hook(L, log):
    x = L.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    y.retain_grad()
    y.register_hook(lambda g: g * 10)
    (y ** 2).sum().backward()
    log += [y.grad, x.grad, y.retains_grad, x.retains_grad]


def hook_then_retain_grad(L, log):
    x = L.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: g * 10)
    y.retain_grad()
    y.retain_grad()  # a second call is a no-op
    (y ** 2).sum().backward()
    log += [y.grad, x.grad]


def retain_grad_accumulates(L, log):
    x = L.tensor(1.0, requires_grad=True)
    y = x * 2
    y.retain_grad()
    z = y * 3
    z.backward(retain_graph=True)
    log.append(y.grad)
    z.backward()
    log.append(y.grad)
    (x * 5).backward()  # another graph sharing the leaf does not touch y.grad
    log += [y.grad, x.grad]


def retain_grad_errors(L, log):
    log.append(raised(lambda: L.tensor([1.0]).retain_grad()))
    x = L.tensor([1.0], requires_grad=True)
    x.retain_grad()
    log.append(x.retains_grad)


def register_on_tensor_without_grad(L, log):
    log.append(raised(lambda: L.tensor([1.0]).register_hook(lambda g: g)))
    log.append(raised(lambda: L.tensor([1.0]).register_post_accumulate_grad_hook(print)))


def wrong_shape_replacement(L, log):
    x = L.tensor([1.0, 2.0], requires_grad=True)

    def bad(g):
        return L.zeros(3)

    y = x * 2
    y.register_hook(bad)
    log.append(raised(lambda: y.sum().backward(), n=40))
    x.register_hook(bad)
    log.append(raised(lambda: (x * 2).sum().backward(), n=40))
    log.append(x.grad)


def wrong_dtype_replacement(L, log):
    x = L.tensor([1.0, 2.0], requires_grad=True)

    def badt(g):
        return g.double()

    x.register_hook(badt)
    log.append(raised(lambda: (x * 2).sum().backward()))
    y = L.tensor([1.0, 2.0], requires_grad=True)
    y.register_hook(lambda g: g.long())
    log.append(raised(lambda: (y * 2).sum().backward()))


def non_tensor_replacement(L, log):
    x = L.tensor([1.0, 2.0], requires_grad=True)
    x.register_hook(lambda g: 3)
    log.append(raised(lambda: (x * 2).sum().backward()))


def leaf_hook_over_passes(L, log):
    x = L.tensor([1.0, 2.0], requires_grad=True)

    def hook(g):
        log.append(("hook", g))
        return g * 10

    x.register_hook(hook)
    for _ in range(2):
        (x * 3).sum().backward()
        log.append(x.grad)


def one_call_per_pass(L, log):
    x = L.tensor([1.0], requires_grad=True)
    x.register_hook(lambda g: log.append(("x", g)))
    y = x * 1
    y.register_hook(lambda g: log.append(("y", g)))
    (y * 2 + y * 3).backward()
    (x * 2 + x * 3).backward()
    log.append(x.grad)


def handle_hygiene(L, log):
    x = L.tensor([1.0], requires_grad=True)
    h = x.register_hook(lambda g: g * 2)
    h.remove()
    h.remove()
    log.append(len(_hooks(L, x)))
    with x.register_hook(lambda g: g * 100):
        (x * 1).backward()
    log.append(x.grad)
    x.grad = None
    (x * 1).backward()
    log += [x.grad, len(_hooks(L, x))]


def hooks_in_a_loop_pile_up(L, log):
    x = L.tensor([1.0], requires_grad=True)
    calls = []
    for _ in range(3):
        x.register_hook(lambda g: calls.append(1))
        calls.clear()
        (x * 2).backward()
        log.append(len(calls))


def hook_removes_itself(L, log):
    x = L.tensor([1.0], requires_grad=True)
    handles = []

    def once(g):
        log.append("once")
        handles[0].remove()

    handles.append(x.register_hook(once))
    x.register_hook(lambda g: log.append(("second", g)))
    (x * 2).backward()
    (x * 2).backward()
    log.append(x.grad)


def inplace_after_registering(L, log):
    x = L.tensor([1.0], requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: log.append(("h1", g)))
    y.mul_(3)
    y.register_hook(lambda g: log.append(("h2", g)))
    (y * 5).backward()
    log.append(x.grad)


def inplace_edit_of_grad_in_hook(L, log):
    x = L.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2

    def edit(g):
        g.mul_(10)

    y.register_hook(edit)
    y.backward(L.tensor([1.0, 1.0]))
    log.append(x.grad)


def post_accumulate_sgd(L, log):
    v = L.tensor([0.0, 0.0, 0.0], requires_grad=True)
    v.register_post_accumulate_grad_hook(lambda p: p.add_(p.grad, alpha=-0.01))
    v.backward(L.tensor([1.0, 2.0, 3.0]))
    log += [v.detach(), v.grad]


def post_accumulate_order_and_accumulation(L, log):
    x = L.tensor([1.0], requires_grad=True)
    x.register_hook(lambda g: log.append(("tensor hook", g)))
    x.register_post_accumulate_grad_hook(lambda p: log.append(("post", p.grad)))
    (x * 2 + x * 3).backward()
    (x * 3).backward()
    log.append(L.autograd.grad(x * 4, x))  # tensor hook fires, post hook does not


def post_accumulate_errors(L, log):
    v = L.tensor([1.0], requires_grad=True)
    v.register_post_accumulate_grad_hook(lambda p: p)  # the tensor itself is accepted
    log.append(raised(lambda: (v * 2).backward()))
    for bad in (lambda p: p * 2, lambda p: 5):
        w = L.tensor([1.0], requires_grad=True)
        w.register_post_accumulate_grad_hook(bad)
        log.append(raised(lambda w=w: (w * 2).backward()))
    y = L.tensor([1.0], requires_grad=True) * 2
    log.append(raised(lambda: y.register_post_accumulate_grad_hook(print), n=60))


def hooks_with_autograd_grad(L, log):
    x = L.tensor(1.0, requires_grad=True)
    x.register_hook(lambda g: g * 7)
    log += [L.autograd.grad(x * 2, x), x.grad]
    y = x * 3
    y.register_hook(lambda g: log.append(("y", g)))
    log.append(L.autograd.grad(y * 2, y))


def grad_mode_inside_hooks(L, log):
    x = L.tensor(1.0, requires_grad=True)
    x.register_hook(lambda g: log.append(("hook", L.is_grad_enabled())))
    x.register_post_accumulate_grad_hook(lambda p: log.append(("post", L.is_grad_enabled())))
    (x * 2).backward()
    with warnings.catch_warnings(record=True):  # the create_graph reference-cycle warning
        (x ** 2).backward(create_graph=True)


def hook_registered_under_no_grad_fires(L, log):
    x = L.tensor([1.0], requires_grad=True)
    with L.no_grad():
        x.register_hook(lambda g: log.append(("hook", g)))
    (x * 4).backward()


def exception_in_hook_propagates_unchanged(L, log):
    class Custom(Exception):
        pass

    err = Custom("boom")
    x = L.tensor([1.0], requires_grad=True)

    def hook(g):
        raise err

    x.register_hook(hook)
    try:
        (x * 2).backward()
    except Custom as exc:
        log.append(exc is err)
    log.append(x.grad)


def backward_inputs_fire_hook_and_set_grad(L, log):
    x = L.tensor([1.0], requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: log.append(("y", g)))
    (y * 3).backward(inputs=[y])
    log += [y.grad, x.grad]


def node_hooks_order(L, log):
    x = L.tensor([1.0], requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: log.append(("tensor", g)))
    y.retain_grad()
    y.grad_fn.register_prehook(lambda go: log.append(("pre", go)))
    y.grad_fn.register_hook(lambda gi, go: log.append(("post", gi, go)))
    (y * 3).backward()
    log.append(y.grad)


def hooks_across_branches_fire_in_creation_order(L, log):
    x = L.tensor([1.0], requires_grad=True)
    a = x * 2
    b = x * 3
    c = a.exp()
    d = b * a
    for name, t in (("a", a), ("b", b), ("c", c), ("d", d)):
        t.register_hook(lambda g, name=name: log.append((name, g)))
    (c + d).sum().backward()
    log.append(x.grad)


def hooks_on_outputs_of_a_multi_output_function(L, log):
    class Split(L.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2, x * 3

        @staticmethod
        def backward(ctx, g1, g2):
            log.append(("backward", g1, g2))
            return g1 * 2 + g2 * 3

    x = L.tensor([1.0, 2.0], requires_grad=True)
    u, v = Split.apply(x)
    v.register_hook(lambda g: g * 10)
    v.retain_grad()
    u.register_hook(lambda g: log.append(("u", g)))
    (u.sum() + (v * v).sum()).backward()
    log += [v.grad, x.grad]


def retain_grad_survives_an_inplace_op(L, log):
    x = L.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    y.retain_grad()
    y.mul_(2)
    (y * 3).sum().backward()
    log += [y.grad, y.retains_grad, x.grad]
    b = x * 1
    v = b[1:]
    b.retain_grad()
    v.retain_grad()
    v.mul_(5)
    (b * L.tensor([1.0, 2.0])).sum().backward()
    log += [b.grad, v.grad, x.grad]


def hooks_on_views(L, log):
    x = L.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 1
    v = y[1:]
    v.register_hook(lambda g: log.append(("view", g)))
    y.register_hook(lambda g: log.append(("base", g)))
    (v * L.tensor([2.0, 3.0])).sum().backward()
    log.append(x.grad)


def post_accumulate_with_backward_inputs(L, log):
    x = L.tensor([1.0], requires_grad=True)
    w = L.tensor([2.0], requires_grad=True)
    x.register_post_accumulate_grad_hook(lambda p: log.append(("x post", p.grad)))
    w.register_post_accumulate_grad_hook(lambda p: log.append(("w post", p.grad)))
    (x * w).backward(inputs=[x])
    log += [x.grad, w.grad]


def autograd_backward_function_form(L, log):
    x = L.tensor([1.0, 2.0], requires_grad=True)
    x.register_hook(lambda g: log.append(("hook", g)))
    L.autograd.backward([x * 2, (x * x).sum()], [L.tensor([1.0, 10.0]), None])
    log.append(x.grad)


def hooks_fire_each_pass_with_retain_graph(L, log):
    x = L.tensor([2.0], requires_grad=True)
    y = x ** 2
    y.register_hook(lambda g: log.append(("y", g)))
    y.backward(retain_graph=True)
    y.backward()
    log.append(x.grad)


def grad_wrt_intermediate_skips_its_node_hooks(L, log):
    x = L.tensor([1.0], requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: log.append(("tensor", g)))
    y.grad_fn.register_prehook(lambda go: log.append(("pre", go)))
    y.grad_fn.register_hook(lambda gi, go: log.append(("post", gi, go)))
    log.append(L.autograd.grad(y * 3, y))
    log.append(y.retains_grad)
    (y * 3).backward(inputs=[y])
    log += [y.grad, x.grad, y.retains_grad]
    log.append(raised(lambda: (y * 5).backward()))  # y's node ran: its saved tensors are freed


def removable_handle_of_a_collected_tensor(L, log):
    import gc
    import weakref

    x = L.tensor([1.0], requires_grad=True)
    handle = x.register_hook(lambda g: g)
    ref = weakref.ref(x)
    del x
    gc.collect()
    log.append(ref() is None)
    handle.remove()
    handle.remove()
    with handle:
        log.append("entered")


PROGRAMS = [
    intermediate_grad, norm_monitor, scaling_hook_removed, closures_save_to_dict,
    zero_negative_via_clone, nan_detector, leaf_doubling, hook_chain, retain_grad_then_hook,
    hook_then_retain_grad, retain_grad_accumulates, retain_grad_errors,
    register_on_tensor_without_grad, wrong_shape_replacement, wrong_dtype_replacement,
    non_tensor_replacement, leaf_hook_over_passes, one_call_per_pass, handle_hygiene,
    hooks_in_a_loop_pile_up, hook_removes_itself, inplace_after_registering,
    inplace_edit_of_grad_in_hook, post_accumulate_sgd, post_accumulate_order_and_accumulation,
    post_accumulate_errors, hooks_with_autograd_grad, grad_mode_inside_hooks,
    hook_registered_under_no_grad_fires, exception_in_hook_propagates_unchanged,
    backward_inputs_fire_hook_and_set_grad, node_hooks_order,
    hooks_across_branches_fire_in_creation_order, hooks_on_outputs_of_a_multi_output_function,
    retain_grad_survives_an_inplace_op, hooks_on_views, post_accumulate_with_backward_inputs,
    autograd_backward_function_form, hooks_fire_each_pass_with_retain_graph,
    grad_wrt_intermediate_skips_its_node_hooks, removable_handle_of_a_collected_tensor,
]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_same_observations_as_pytorch(program):
    assert_same(program)


def test_spec_values_hold():
    """The values the parity spec records, so a change on either side is noticed."""
    log = assert_same(intermediate_grad)
    assert log[0][1][3] == [12.0, 48.0, 108.0] and log[1][3] == [24.0, 96.0, 216.0]
    assert assert_same(hook_chain)[0] == ("seen", ("tensor", "float32", (1,), [20.0]))
    assert assert_same(inplace_after_registering)[:2] == [
        ("h2", ("tensor", "float32", (1,), [5.0])), ("h1", ("tensor", "float32", (1,), [15.0]))]
