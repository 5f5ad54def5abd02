"""The graph against PyTorch: node hooks (on AccumulateGrad too), next_functions and metadata,
torch.autograd.graph (multi-grad hooks, saved-tensor hooks, save_on_cpu, increment_version,
gradient edges) and activation checkpointing, with the hooks inside it."""

import warnings

import pytest
from dual import assert_same, raised

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")


def t(L, data, **kw):
    return L.tensor(data, **kw)


# -- node hooks --------------------------------------------------------------------------------

def accumulate_grad_hooks(L, log):
    x = t(L, [1.0, 2.0], requires_grad=True)
    acc = (x * 2).grad_fn.next_functions[0][0]
    log.append(acc.name())
    x.register_hook(lambda g: log.append(("tensor", g.clone())))
    acc.register_prehook(lambda go: log.append(("pre", go[0].clone())))
    h = acc.register_prehook(lambda go: (go[0] * 10,))
    acc.register_hook(lambda gi, go: log.append(("post", gi, go[0].clone())))
    x.register_post_accumulate_grad_hook(lambda p: log.append(("accumulated", p.grad.clone())))
    (x * 2).sum().backward()
    h.remove()
    L.autograd.grad((x * 3).sum(), x)  # grad() runs no sink: only the tensor hook fires
    log.append(x.grad)
    log.append(raised(lambda: (x * 1).grad_fn.next_functions[0][0].register_hook(
        lambda gi, go: (go[0],)) and (x * 1).sum().backward()))


def node_hooks_see_tensor_inputs_only(L, log):
    x = t(L, [[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    s = x.sum(1)
    s.grad_fn.register_prehook(lambda go: log.append(("pre", go)))
    s.grad_fn.register_hook(lambda gi, go: log.append(("post", len(gi), gi, go)))
    c = x.clamp(0, 2.5)
    c.grad_fn.register_hook(lambda gi, go: (gi[0] * 3,))
    (s.sum() + c.sum()).backward()
    log.append(x.grad.clone())

    def bad_post(gi, go):
        return (gi[0], gi[0])

    def bad_pre(go):
        return (go[0], go[0])
    y = x * 2
    y.grad_fn.register_hook(bad_post)
    log.append(raised(lambda: y.sum().backward()))
    z = x * 2
    z.grad_fn.register_prehook(bad_pre)
    log.append(raised(lambda: z.sum().backward()))
    w = x * 2
    w.grad_fn.register_prehook(lambda go: 5)
    log.append(raised(lambda: w.sum().backward()))


def node_metadata_and_type(L, log):
    x = t(L, [1.0, 2.0], requires_grad=True)
    y = x * x
    y.grad_fn.metadata["step"] = 3
    log.append(dict(y.grad_fn.metadata))
    log.append(isinstance(y.grad_fn, L.autograd.graph.Node))
    log.append(isinstance(y.grad_fn.next_functions[0][0], L.autograd.graph.Node))
    log.append(y.grad_fn.name())
    edge = L.autograd.graph.get_gradient_edge(y)
    log.append((edge.node is y.grad_fn, edge.output_nr))
    a, b = x.unbind()
    log.append(L.autograd.graph.get_gradient_edge(b).output_nr)
    log.append(raised(lambda: L.autograd.graph.get_gradient_edge(t(L, [1.0]))))


NEXT_FUNCTIONS = {
    "mul_number": lambda L, x, c: x * 2,
    "mul_tensor": lambda L, x, c: x * c,
    "add_number": lambda L, x, c: x + 1,
    "rsub": lambda L, x, c: 2 - x,
    "pow_number": lambda L, x, c: x ** 2,
    "div_number": lambda L, x, c: x / 2,
    "clamp": lambda L, x, c: x.clamp(0, 1),
    "sum_dim": lambda L, x, c: x.sum(0),
    "reshape": lambda L, x, c: x.reshape(3, 1),
    "cat": lambda L, x, c: L.cat([x, c]),
    "where_number": lambda L, x, c: L.where(x > 1, x, 0.0),
    "index": lambda L, x, c: x[0],
    "maximum": lambda L, x, c: L.maximum(x, c),
    "split": lambda L, x, c: x.split(2)[1],
    "var_mean": lambda L, x, c: L.var_mean(x)[0],
}


def next_functions_one_entry_per_tensor_input(L, log):
    for name, fn in NEXT_FUNCTIONS.items():
        x = t(L, [1.0, 2.0, 3.0], requires_grad=True)
        c = t(L, [0.5, 2.5, 1.0])
        y = fn(L, x, c)
        log.append((name, y.grad_fn.name(),
                    [(None if n is None else n.name(), nr) for n, nr in y.grad_fn.next_functions]))


# -- torch.autograd.graph ----------------------------------------------------------------------

def multi_grad_hook_all(L, log):
    a = t(L, [1.0, 2.0], requires_grad=True)
    b = t(L, [3.0, 4.0], requires_grad=True)
    c = a * b
    d = a * b
    h = L.autograd.graph.register_multi_grad_hook(
        (a, b, c, d), lambda grads: log.append([g is not None for g in grads]))
    c.sum().backward(retain_graph=True)
    c.sum().backward(inputs=(a,), retain_graph=True)
    log.append(raised(lambda: L.autograd.grad(c.sum(), (a, b), retain_graph=True)))
    e = a * 1
    f = b * 1
    g = L.autograd.graph.register_multi_grad_hook(
        (e, f), lambda grads: log.append([x is not None for x in grads]))
    L.autograd.grad((e * f).sum(), (e,))  # non-leaves: counted in grad() too
    g.remove()
    h.remove()
    c.sum().backward()
    log.append(a.grad)


def multi_grad_hook_any(L, log):
    a = t(L, [1.0, 2.0], requires_grad=True)
    b = t(L, [3.0, 4.0], requires_grad=True)
    seen = []
    L.autograd.graph.register_multi_grad_hook((a, b), lambda g: seen.append(g), mode="any")
    (a * b).sum().backward()
    (a * 5).sum().backward()
    log.append(seen)
    log.append(raised(lambda: L.autograd.graph.register_multi_grad_hook((a,), print,
                                                                        mode="some")))


def saved_tensors_hooks(L, log):
    def pack(x):
        log.append(("pack", tuple(x.shape), x.requires_grad, x.grad_fn is not None))
        return x.detach() * 1

    def unpack(x):
        log.append(("unpack", tuple(x.shape)))
        return x

    a = t(L, [1.0, 2.0], requires_grad=True)
    b = t(L, [3.0, 4.0], requires_grad=True) * 2
    with L.autograd.graph.saved_tensors_hooks(pack, unpack):
        y = a * b
        z = y.exp()
        w = a * 2  # a Python number is not a saved tensor
        with L.no_grad():
            a.exp()  # nothing is saved without a graph
    (z.sum() + w.sum()).backward()
    log += [a.grad, w]


def saved_tensors_hooks_errors_and_nesting(L, log):
    a = t(L, [1.0, 2.0], requires_grad=True)

    def modifies(x):
        x.add_(1)
        return x
    with L.autograd.graph.saved_tensors_hooks(modifies, lambda p: p):
        log.append(raised(lambda: (a * 1).exp()))
    with L.autograd.graph.saved_tensors_hooks(lambda x: 1, lambda p: p):
        e = a.exp()
    log.append(raised(lambda: e.sum().backward()))
    seen = []
    with L.autograd.graph.saved_tensors_hooks(lambda x: seen.append("outer") or x, lambda p: p):
        with L.autograd.graph.saved_tensors_hooks(lambda x: seen.append("inner") or x,
                                                  lambda p: p):
            a.exp()
        a.exp()
    log.append(seen)
    with L.autograd.graph.saved_tensors_hooks(lambda x: x.detach(), lambda p: p):
        y = (a * 1).exp()
    with L.no_grad():
        y.add_(1)  # not version-checked: the hooks own what was saved
    y.sum().backward()
    log.append(a.grad)


def save_on_cpu_keeps_the_tensor(L, log):
    a = t(L, [1.0, 2.0], dtype=L.float64, requires_grad=True)
    with L.autograd.graph.save_on_cpu():
        y = (a * 1).exp()
        z = y * y
    with L.no_grad():
        y.add_(1)  # on the CPU the saved tensors are the originals, and not version-checked
    z.sum().backward()
    log += [a.grad, z]


def increment_version(L, log):
    a = t(L, [1.0, 2.0], requires_grad=True)
    y = a.exp()
    log.append(y._version)
    L.autograd.graph.increment_version(y)
    L.autograd.graph.increment_version([y, a])
    log += [y._version, a._version]
    log.append(raised(lambda: y.sum().backward(), n=160))


# -- activation checkpointing ------------------------------------------------------------------

def _checkpointed_model(L, log, reentrant):
    lin = L.nn.Linear(2, 2)
    with L.no_grad():
        lin.weight.copy_(t(L, [[1.0, 2.0], [3.0, 4.0]]))
        lin.bias.zero_()
    lin.register_forward_pre_hook(lambda m, a: log.append("forward pre-hook"))
    lin.register_forward_hook(lambda m, a, o: log.append(("forward hook", L.is_grad_enabled())))
    lin.register_full_backward_hook(lambda m, gi, go: log.append(("backward hook", go)))

    def fn(x):
        h = lin(x)
        if h.requires_grad:
            h.register_hook(lambda g: log.append(("h hook", g)))
        log.append(("in fn", L.is_grad_enabled(), h.requires_grad))
        return (h * h).sum(0)

    x = t(L, [[1.0, 1.0]], requires_grad=True)
    y = L.utils.checkpoint.checkpoint(fn, x, use_reentrant=reentrant)
    log.append(("after forward", y.requires_grad))
    y.register_hook(lambda g: log.append(("y hook", g)))
    y.sum().backward()
    log += [x.grad, lin.weight.grad]


def checkpoint_non_reentrant(L, log):
    _checkpointed_model(L, log, False)


def checkpoint_reentrant(L, log):
    _checkpointed_model(L, log, True)


def checkpoint_recomputes_with_the_forwards_random_state(L, log):
    L.manual_seed(0)
    drop = L.nn.Dropout(0.5)
    x = L.ones(6, requires_grad=True)
    y = L.utils.checkpoint.checkpoint(lambda v: drop(v) * v, x, use_reentrant=False)
    L.rand(3)  # moves the global generator between forward and backward
    y.sum().backward()
    plain = x.detach().requires_grad_()
    kept = (y / x).detach()  # the mask the forward drew (scaled): what backward must reuse
    (kept * plain * plain).sum().backward()
    log.append(bool((x.grad == plain.grad).all()))


def checkpoint_arguments_and_errors(L, log):
    x = t(L, [1.0, 2.0], requires_grad=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = L.utils.checkpoint.checkpoint(lambda v: v.exp(), x)
    log.append([str(w.message).split(":")[1][:40] for w in caught])
    log.append(raised(lambda: L.autograd.grad(y.sum(), x), n=60))
    log.append(raised(lambda: L.utils.checkpoint.checkpoint(lambda v: v, x, use_reentrant=True,
                                                            extra=1)))
    log.append(raised(lambda: L.utils.checkpoint.checkpoint(
        lambda v: v, x, use_reentrant=True, context_fn=lambda: (None, None))))
    z = L.utils.checkpoint.checkpoint(lambda v, k=1.0: (v * v * k).sum(), x, k=3.0,
                                      use_reentrant=False)
    log.append(L.autograd.grad(z, x))


PROGRAMS = [
    accumulate_grad_hooks, node_hooks_see_tensor_inputs_only, node_metadata_and_type,
    next_functions_one_entry_per_tensor_input, multi_grad_hook_all, multi_grad_hook_any,
    saved_tensors_hooks, saved_tensors_hooks_errors_and_nesting, save_on_cpu_keeps_the_tensor,
    increment_version, checkpoint_non_reentrant, checkpoint_reentrant,
    checkpoint_recomputes_with_the_forwards_random_state, checkpoint_arguments_and_errors,
]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_same_observations_as_pytorch(program):
    assert_same(program)
