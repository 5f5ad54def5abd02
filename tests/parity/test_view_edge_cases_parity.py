"""Edge cases of views against PyTorch: in-place view ops on the outputs of multi-view ops,
views of a leaf made to require grad after its base, views taken before their base changed
shape in place, views made under no_grad, hooks across an in-place view op, and inference
tensors through pickle and deepcopy."""

import copy
import pickle

import pytest
from dual import assert_same, raised

torch = pytest.importorskip("torch")


def t(L, data, **kw):
    return L.tensor(data, **kw)


def pickled_or_copied_inference_tensors_are_normal(L, log):
    with L.inference_mode():
        n = L.ones(2)
    log += [pickle.loads(pickle.dumps(n)).is_inference(), copy.deepcopy(n).is_inference()]


def hooks_and_retain_grad_across_an_inplace_view_op(L, log):
    x = L.arange(6.0).reshape(2, 3).requires_grad_()
    y = x * 1
    y.register_hook(lambda g: log.append(("old", g)))
    y.t_()
    y.register_hook(lambda g: log.append(("new", g)))
    (y * 2).sum().backward()
    z = x * 1
    z.t_()
    z.register_hook(lambda g: log.append(("fresh", g)))
    (z * L.arange(6.0).reshape(3, 2)).sum().backward()
    log.append(x.grad)


def inplace_view_op_errors(L, log):
    x = L.ones(2, 3, requires_grad=True)
    log.append(raised(lambda: x.t_()))
    with L.no_grad():
        log += [tuple(x.t_().shape), x.grad_fn, x._version]
    log.append(raised(lambda: L.ones(2, 2, 2).t_()))
    log.append(raised(lambda: L.ones(2, 2).transpose_(0, 2)))
    log.append(raised(lambda: L.ones(2, 2).unsqueeze_(3)))
    log.append(raised(lambda: L.ones(2, 2).as_strided_((5,), (1,))))
    log.append(raised(lambda: L.ones(4).as_strided((2,), (1, 2))))
    log.append(raised(lambda: L.ones(4).as_strided((2,), (-1,))))
    y = x * 1
    z = y * y
    y.t_()
    log.append(raised(lambda: z.sum().backward(), n=110))
    z = (x * 1).exp()
    z.unsqueeze_(0)
    log.append(raised(lambda: z.sum().backward(), n=110))
    a = (x * 1).unbind()[0]
    log.append(raised(lambda: a.unsqueeze_(0)))
    with L.no_grad():
        log.append(tuple(a.unsqueeze_(0).shape))


def inplace_on_a_view_of_a_leaf_made_from_a_view(L, log):
    for op in ("t_", "mul_", "unsqueeze_"):
        x = L.arange(6.0).reshape(2, 3).requires_grad_()
        args = {"t_": (), "mul_": (2,), "unsqueeze_": (0,)}[op]
        log.append(raised(lambda x=x, op=op, args=args: getattr(x[:1], op)(*args)))
        with L.no_grad():
            log.append(getattr(x[1:], op)(*args))
        log.append(x)
    for shape_change in (False, True):
        a = L.arange(6.0)
        x = a.reshape(2, 3).requires_grad_()
        if shape_change:
            with L.no_grad():
                x.t_()
        a.mul_(2)  # x, a leaf of its own, keeps requires_grad and sees the new values
        y = x * 1
        log += [x.requires_grad, x.is_leaf, x.grad_fn, y]
        y.sum().backward()
        log.append(x.grad)


def views_made_under_no_grad_of_tensors_that_require_grad(L, log):
    x = t(L, [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
    y = x * 1
    with L.no_grad():
        u, v, w = y[:1], x[:1], (y * 1)[:1]
    log += [(u.requires_grad, u._is_view(), u.grad_fn, u.is_leaf),
            (v.requires_grad, v._is_view(), v.grad_fn, v.is_leaf), w.requires_grad]
    for view in (u, v):
        log.append(raised(lambda view=view: view.mul_(2)))
        log.append(raised(lambda view=view: view.t_()))
    with L.no_grad():
        log.append(u.mul_(2))
    log.append(raised(lambda: u * 3))  # changed in place, even under no_grad: refused
    with L.no_grad():
        u = y[:1]
    (u * 3).sum().backward()  # u is a leaf of its own: nothing reaches x
    log += [u.grad, x.grad]
    with L.no_grad():
        u = y[:1]
    y.mul_(2)
    log.append(raised(lambda: u.grad_fn))
    log.append(raised(lambda: u * 2))


def views_taken_before_a_shape_change_in_place(L, log):
    a = L.arange(6.0).reshape(2, 3).requires_grad_()
    y = a * 2
    w = y.view(6)
    y.t_()
    log += [w.grad_fn.name(), y.grad_fn.name(), w]
    (w * L.arange(6.0)).sum().backward()
    log.append(a.grad)
    b = L.ones(2, 3)
    row = b[0]
    b.t_()
    log += [b._version, row._version, tuple(b.shape), tuple(row.shape)]


@pytest.mark.parametrize("program", [
    pickled_or_copied_inference_tensors_are_normal, hooks_and_retain_grad_across_an_inplace_view_op,
    inplace_view_op_errors, inplace_on_a_view_of_a_leaf_made_from_a_view,
    views_made_under_no_grad_of_tensors_that_require_grad,
    views_taken_before_a_shape_change_in_place,
])
def test_same_as_pytorch(program):
    assert_same(program)
