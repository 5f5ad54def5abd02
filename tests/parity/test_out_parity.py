"""``out=`` on the arithmetic and matrix-product functions against PyTorch: the written
values, the returned object, versions, resizing (and its warning), casting, and the refusal
when an input or ``out`` requires grad under grad mode."""

import warnings

import pytest
from dual import assert_same, raised

torch = pytest.importorskip("torch")


def out_writes_and_returns_the_out_tensor(L, log):
    a, b = L.tensor([1.0, 2.0, 3.0]), L.tensor([4.0, 5.0, 6.0])
    c = L.zeros(3)
    log += [L.mul(a, b, out=c) is c, c, c._version]
    calls = [lambda o: L.add(a, b, alpha=2, out=o), lambda o: L.sub(a, 1, out=o),
             lambda o: L.div(a, b, rounding_mode="floor", out=o), lambda o: L.pow(a, 2, out=o),
             lambda o: L.multiply(a, b, out=o), lambda o: L.true_divide(a, b, out=o),
             lambda o: L.neg(a, out=o), lambda o: L.square(a, out=o),
             lambda o: L.reciprocal(a, out=o), lambda o: L.remainder(b, a, out=o),
             lambda o: L.floor_divide(b, a, out=o), lambda o: L.subtract(a, b, alpha=3, out=o)]
    for call in calls:
        log.append(call(c))
    log.append(c._version)
    log.append(L.matmul(a, b, out=L.zeros(())))
    m = L.arange(6.0).reshape(2, 3)
    log += [L.mm(m, m.t(), out=L.zeros(2, 2)), L.outer(a, b, out=L.zeros(3, 3)),
            L.bmm(m[None], m.t()[None], out=L.zeros(1, 2, 2)), L.dot(a, b, out=L.zeros(()))]
    log.append(L.mul(a, b, out=a) is a)  # an input as out
    log.append(a)
    v = L.zeros(2, 3)
    L.add(b, b, out=v[0])  # a view as out writes through
    log.append(v)


def out_is_resized_and_cast(L, log):
    a, b = L.tensor([1.0, 2.0, 3.0]), L.tensor([4.0, 5.0, 6.0])
    for out in (L.zeros(2), L.zeros(0)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            log.append(L.mul(a, b, out=out))
        log.append([str(w.message)[:100] for w in caught])
    log.append(raised(lambda: L.mul(a, b, out=L.zeros(3, dtype=L.int64))))
    log.append(L.add(L.tensor([1, 2, 3]), 1, out=L.zeros(3, dtype=L.int64)))
    log.append(L.mul(L.tensor([1, 2, 3]), 2, out=L.zeros(3)))  # int result into float


def out_refuses_autograd(L, log):
    a, b = L.tensor([1.0, 2.0, 3.0]), L.tensor([4.0, 5.0, 6.0])
    x = L.ones(3, requires_grad=True)
    c = L.zeros(3)
    log.append(raised(lambda: L.mul(x, b, out=c)))
    log.append(raised(lambda: L.add(a, x, out=c)))
    log.append(raised(lambda: L.mul(a, b, out=L.zeros(3, requires_grad=True))))
    y = x * 1
    log.append(raised(lambda: L.mul(a, b, out=y)))
    log.append(raised(lambda: L.matmul(x, b, out=L.zeros(()))))
    log.append(c)
    with L.no_grad():
        log.append(L.mul(x, b, out=c))
        o = L.zeros(3, requires_grad=True)
        log += [L.mul(a, b, out=o), o.requires_grad, o.is_leaf]
    with L.inference_mode():
        i = L.zeros(3)
    log.append(raised(lambda: L.mul(a, b, out=i)))
    with L.inference_mode():
        log.append((L.mul(a, b, out=i), i.is_inference()))


PROGRAMS = [out_writes_and_returns_the_out_tensor, out_is_resized_and_cast, out_refuses_autograd]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_same_observations_as_pytorch(program):
    assert_same(program)
