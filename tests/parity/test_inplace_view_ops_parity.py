"""In-place view ops against PyTorch: transpose_, t_, squeeze_, unsqueeze_, swapdims_,
as_strided_ (and as_strided): values, node names, versions, view-ness, gradients, hooks and
errors."""

import pytest
from dual import assert_same, raised

torch = pytest.importorskip("torch")


def node(t):
    return t.grad_fn.name()


def inplace_view_ops_record_their_nodes(L, log):
    x = L.arange(6.0).reshape(2, 3).requires_grad_()
    y = x * 1
    log += [y.transpose_(0, 1), node(y), y._version, y._is_view(), y.is_leaf]
    (y * L.arange(6.0).reshape(3, 2)).sum().backward()
    log.append(x.grad)
    y = x * 1
    log += [node(y.t_()), node(y.squeeze_()), tuple(y.unsqueeze_(1).shape), node(y),
            node(y.squeeze_(1)), node(y.swapdims_(0, 1)), node(y.swapaxes_(0, 1)),
            tuple(y.unsqueeze_(0).unsqueeze_(0).shape), node(y.squeeze_((0, 1))), y._version]
    a = L.ones(1, 3, 1)
    log += [a.squeeze_(), a._version, L.ones(2).t_()]


def inplace_view_ops_on_views(L, log):
    x = L.arange(6.0).reshape(2, 3).requires_grad_()
    y = x * 1
    v = y[0]
    log += [v.unsqueeze_(0), node(v), v._is_view(), v._base is y, y._version, node(y)]
    (v * L.tensor([[1.0, 2.0, 3.0]])).sum().backward()
    log.append(x.grad)
    d = L.zeros(2, 3)
    e = d[0:2]
    e.t_()
    e[0, 1] = 5.0
    log += [d, e.shape, e._version]


def hooks_and_saved_tensors_across_an_inplace_view_op(L, log):
    b = L.ones(2, 2, requires_grad=True)
    c = b * 1
    c.register_hook(lambda g: log.append(("hook", g)))
    c.t_()
    (c * L.tensor([[1.0, 2.0], [3.0, 4.0]])).sum().backward()
    log.append(b.grad)
    x = L.ones(3, requires_grad=True)
    z = x * 1
    zz = z * z
    z.t_()
    log.append(raised(lambda: zz.sum().backward(), n=100))


def inplace_view_op_errors(L, log):
    x = L.ones(2, 3, requires_grad=True)
    log.append(raised(lambda: x.t_()))
    log.append(raised(lambda: x[0].unsqueeze_(0)))
    leaf_view = L.arange(6.0).reshape(2, 3).requires_grad_()  # a leaf that is a view
    log += [raised(lambda: leaf_view.t_()), raised(lambda: leaf_view.add_(1))]
    with L.no_grad():
        log += [x.t_().shape, x.is_leaf, x.requires_grad]
    log.append(raised(lambda: L.ones(2, 2, 2).t_()))
    log.append(raised(lambda: L.ones(2).transpose_(0, 3)))
    log.append(raised(lambda: L.ones(2, 3).squeeze_(5)))
    log.append(raised(lambda: L.ones(2, 3).unsqueeze_(5)))
    with L.inference_mode():
        i = L.ones(2, 3)
    log.append(raised(lambda: i.t_()))


def as_strided_views_and_gradients(L, log):
    s = L.arange(12.0).reshape(3, 4)
    log += [L.as_strided(s, (2, 2), (1, 4), 1), s[1:].as_strided((2, 3), (4, 1))]
    p = L.arange(6.0, requires_grad=True)
    q = p * 1
    o = q.as_strided((3, 2), (1, 1))
    (o * L.arange(6.0).reshape(3, 2)).sum().backward()
    log.append(p.grad)
    x = L.arange(6.0).reshape(2, 3).t().requires_grad_()  # (a non-contiguous leaf)
    y = x * 1
    log += [y.as_strided_((3,), (2,)), node(y)]
    y.sum().backward()
    log.append(x.grad)


PROGRAMS = [inplace_view_ops_record_their_nodes, inplace_view_ops_on_views,
            hooks_and_saved_tensors_across_an_inplace_view_op, inplace_view_op_errors,
            as_strided_views_and_gradients]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_same_observations_as_pytorch(program):
    assert_same(program)
