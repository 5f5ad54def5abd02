"""The backward engine: accumulation, retain_graph, backward/grad arguments and errors, graph
walks (deep chains, shared subgraphs), and the end-of-backward signal. Expected values are the
ones PyTorch gives (tests/parity runs the same programs against it)."""

import gc
import weakref

import numpy as np
import pytest

import gradlog as gl

SECOND_TIME = "Trying to backward through the graph a second time"


def test_grad_accumulates_over_backward_passes():
    x = gl.tensor(2.0, requires_grad=True)
    seen = []
    for _ in range(3):
        (x ** 2).backward()
        seen.append(x.grad.item())
    assert seen == [4.0, 8.0, 12.0]


def test_zeroing_each_step_gives_the_same_gradient():
    x = gl.tensor(2.0, requires_grad=True)
    seen = []
    for _ in range(3):
        x.grad = None
        (x ** 2 + x).backward()
        seen.append(x.grad.item())
    assert seen == [5.0, 5.0, 5.0]


def test_retain_graph_allows_a_second_backward_and_the_third_fails():
    x = gl.tensor(2.0, requires_grad=True)
    y = x ** 3
    y.backward(retain_graph=True)
    assert x.grad.item() == 12.0
    x.grad = None
    y.backward()
    assert x.grad.item() == 12.0
    with pytest.raises(RuntimeError, match=SECOND_TIME):
        y.backward()


def test_without_retain_graph_the_second_backward_fails():
    x = gl.tensor(2.0, requires_grad=True)
    y = x ** 3
    y.backward()
    with pytest.raises(RuntimeError, match=SECOND_TIME):
        y.backward()
    assert x.grad.item() == 12.0


def test_a_graph_without_saved_tensors_can_be_walked_twice():
    x = gl.tensor(1.0, requires_grad=True)
    y = x + x
    y.backward()
    y.backward()
    assert x.grad.item() == 4.0


def test_non_scalar_backward_needs_a_gradient():
    x = gl.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar"):
        (x * 2).backward()
    (x * 2).backward(gl.tensor([1.0, 10.0]))
    assert x.grad.tolist() == [2.0, 20.0]


def test_gradient_of_the_wrong_shape_is_refused():
    x = gl.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match=r"Mismatch in shape: grad_output\[0\] has a shape"):
        (x * 2).backward(gl.ones(3))


def test_backward_of_a_tensor_without_grad_fails():
    with pytest.raises(RuntimeError, match="element 0 of tensors does not require grad"):
        gl.tensor([1.0]).sum().backward()


def test_backward_inputs_accumulates_only_into_the_listed_tensors():
    a = gl.tensor(3.0, requires_grad=True)
    b = gl.tensor(2.0, requires_grad=True)
    (a * b).backward(inputs=[a])
    assert a.grad.item() == 2.0 and b.grad is None
    y = a * 4
    (y * b).backward(inputs=[y])
    assert y.grad.item() == 2.0 and a.grad.item() == 2.0


def test_autograd_grad_returns_gradients_without_touching_grad():
    x = gl.tensor([1.0, 2.0], requires_grad=True)
    (g,) = gl.autograd.grad((x ** 2).sum(), x)
    assert g.tolist() == [2.0, 4.0]
    assert x.grad is None


def test_autograd_grad_unused_inputs():
    x = gl.tensor(2.0, requires_grad=True)
    z = gl.tensor(1.0, requires_grad=True)
    with pytest.raises(RuntimeError, match="index 1 appears to not have been used in the graph"):
        gl.autograd.grad(x ** 2, [x, z])
    gx, gz = gl.autograd.grad(x ** 2, [x, z], allow_unused=True)
    assert gx.item() == 4.0 and gz is None
    gx, gz = gl.autograd.grad(x ** 2, [x, z], materialize_grads=True)
    assert gz.item() == 0.0 and gz.dtype == gl.float32
    assert x.grad is None and z.grad is None


def test_autograd_grad_accepts_a_dict_of_inputs():
    x = gl.tensor(2.0, requires_grad=True)
    w = gl.tensor(3.0, requires_grad=True)
    grads = gl.autograd.grad(x * w, {"x": x, "w": w})
    assert {k: v.item() for k, v in grads.items()} == {"x": 3.0, "w": 2.0}


def test_autograd_grad_with_grad_outputs_and_several_outputs():
    v = gl.tensor([1.0, 2.0], requires_grad=True)
    (g,) = gl.autograd.grad(v * 3, v, grad_outputs=gl.tensor([1.0, 10.0]))
    assert g.tolist() == [3.0, 30.0]
    (g,) = gl.autograd.grad([v.sum(), (v * v).sum()], [v])
    assert g.tolist() == [3.0, 5.0]


def test_create_graph_gives_differentiable_gradients():
    x = gl.tensor(2.0, requires_grad=True)
    (g,) = gl.autograd.grad(x ** 3, x, create_graph=True)
    assert g.item() == 12.0 and g.requires_grad
    (gg,) = gl.autograd.grad(g, x)
    assert gg.item() == 12.0


def test_backward_with_create_graph_warns_about_the_reference_cycle():
    x = gl.tensor(2.0, requires_grad=True)
    with pytest.warns(UserWarning, match="Using backward\\(\\) with create_graph=True"):
        (x ** 3).backward(create_graph=True)
    assert x.grad.item() == 12.0 and x.grad.requires_grad


def test_gradient_penalty_backpropagates_through_the_input_gradient():
    # f(x) = sum(w * x^2), df/dx = 2 w x, penalty = sum((2 w x)^2) = 4 sum(w^2 x^2)
    w = gl.tensor([1.0, -2.0], dtype=gl.float64, requires_grad=True)
    x = gl.tensor([3.0, 0.5], dtype=gl.float64, requires_grad=True)
    (gx,) = gl.autograd.grad((w * x * x).sum(), x, create_graph=True)
    penalty = (gx ** 2).sum()
    penalty.backward()
    assert penalty.item() == pytest.approx(4 * (9 + 4 * 0.25))
    assert w.grad.tolist() == pytest.approx([8 * 1 * 9, 8 * -2 * 0.25])  # 8 w x^2
    assert x.grad.tolist() == pytest.approx([8 * 1 * 3, 8 * 4 * 0.5])  # 8 w^2 x


def test_a_chain_of_100000_ops_backpropagates():
    x = gl.tensor(1.0, dtype=gl.float64, requires_grad=True)
    y = x
    for _ in range(50_000):
        y = y * 1.0001
        y = y - 0.5
    y.backward()
    assert x.grad.item() == pytest.approx(1.0001 ** 50_000)
    del y
    gc.collect()  # freeing the deep graph must not overflow the stack either


def test_each_node_runs_once_in_a_shared_graph():
    calls = {}

    class Count(gl.autograd.Function):
        @staticmethod
        def forward(ctx, x, k):
            ctx.k = k
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            calls[ctx.k] = calls.get(ctx.k, 0) + 1
            return g, None

    x = gl.tensor(1.0, requires_grad=True)
    y = x
    for k in range(30):  # every level is used twice: 2^30 paths, 30 nodes
        y = Count.apply(y, k)
        y = y + y
    y.backward()
    assert calls == {k: 1 for k in range(30)}
    assert x.grad.item() == 2.0 ** 30


def test_leaf_gradient_is_the_sum_over_all_uses():
    x = gl.tensor([1.0, 2.0], requires_grad=True)
    (x * x + x.exp() - x / 2).sum().backward()
    expected = 2 * np.array([1.0, 2.0]) + np.exp([1.0, 2.0]) - 0.5
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-6)


def test_grad_is_a_copy_not_an_alias_of_an_engine_buffer():
    x = gl.tensor([1.0, 2.0], requires_grad=True)
    g = gl.tensor([1.0, 1.0])
    x.backward(g)
    g.mul_(100)
    assert x.grad.tolist() == [1.0, 1.0]


def test_a_callers_gradient_that_requires_grad_is_copied_into_grad():
    x = gl.tensor([1.0, 2.0], requires_grad=True)
    with gl.no_grad():
        v = gl.tensor([1.0, 1.0]) * 3  # an array the op made, handed to the caller
    v.requires_grad_()
    x.clone().backward(v)
    with gl.no_grad():
        v.mul_(0)
    assert x.grad.tolist() == [3.0, 3.0]


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True")
def test_under_create_graph_grad_and_retained_grads_are_copies():
    x = gl.tensor([1.0, 2.0], requires_grad=True)
    v = gl.tensor([1.0, 1.0])
    held = gl.tensor([5.0, 5.0])
    x.register_hook(lambda g: held if g.tolist() == [2.0, 2.0] else None)
    x.clone().backward(v, create_graph=True)  # the clone passes v through unchanged
    v.zero_()
    assert x.grad.tolist() == [1.0, 1.0]
    x.grad = None
    (x * 2).sum().backward(create_graph=True)  # the hook returns `held`
    held.zero_()
    assert x.grad.tolist() == [5.0, 5.0]
    y = x.clone()
    y.retain_grad()
    y.sum().backward(create_graph=True)
    with gl.no_grad():
        y.grad.mul_(10)
    assert y.grad.tolist() == [10.0, 10.0] and x.grad.tolist() == [6.0, 6.0]


def test_non_leaf_grad_is_none_with_pytorchs_warning():
    x = gl.tensor([1.0], requires_grad=True)
    y = x * 2
    y.backward()
    with pytest.warns(UserWarning, match="The .grad attribute of a Tensor that is not a leaf"):
        assert y.grad is None


def test_flags_of_leaves_results_and_detached_tensors():
    x = gl.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    assert x.is_leaf and not y.is_leaf and y.requires_grad
    assert y.grad_fn.name() == "MulBackward0"
    d = y.detach()
    assert not d.requires_grad and d.grad_fn is None and d.is_leaf
    d[0] = -1
    assert y.tolist() == [-1.0, 6.0]
    with pytest.raises(RuntimeError, match="you can only change requires_grad flags of leaf"):
        y.requires_grad_(False)
    with pytest.raises(RuntimeError, match="only Tensors of floating point dtype can require"):
        gl.tensor([1, 2]).requires_grad_()


def test_assigning_a_grad_of_another_shape_is_refused():
    x = gl.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match=r"attempting to assign a gradient of size '\[3\]'"):
        x.grad = gl.zeros(3)


def test_backward_end_hook_fires_after_backward_but_not_after_grad():
    fired = []
    x = gl.tensor(1.0, requires_grad=True)
    with gl.autograd.register_backward_end_hook(lambda: fired.append(x.grad.item())):
        (x * 3).backward()
        gl.autograd.grad(x * 5, x)
    (x * 7).backward()
    assert fired == [3.0]


def test_a_finished_graph_is_freed():
    x = gl.tensor([1.0, 2.0], requires_grad=True)
    y = (x * 2).exp()
    node = weakref.ref(y.grad_fn)
    y.sum().backward()
    del y
    gc.collect()
    assert node() is None


def test_edges_name_the_output_of_a_multi_output_node():
    class Halves(gl.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x[:2].clone(), x[2:].clone()

        @staticmethod
        def backward(ctx, g1, g2):
            return gl.cat([g1, g2])

    x = gl.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    first, second = Halves.apply(x)
    node = first.grad_fn
    a, b = first * 2, second * 3
    assert a.grad_fn.next_functions == ((node, 0), (None, 0))
    assert b.grad_fn.next_functions == ((node, 1), (None, 0))
    (a + b).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0, 3.0, 3.0]


class _KeepsItsGradient(gl.autograd.Function):
    """Identity whose backward keeps the gradient it returns, as a user's Function may."""

    kept: list = []

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        out = g * 1
        _KeepsItsGradient.kept.append(out)
        return out


@pytest.mark.parametrize("other_requires_grad", [False, True],
                         ids=["passed-through", "returned-twice"])
def test_a_leaf_never_takes_memory_another_tensor_holds(other_requires_grad):
    # x + w passes the gradient through to x (w a constant) or returns that one tensor for x
    # and w. A leaf may take a gradient's array instead of copying it only when nothing else
    # holds it; had it taken the kept tensor's, the next accumulation would change that tensor
    _KeepsItsGradient.kept.clear()
    x = gl.tensor([1.0, 2.0], requires_grad=True)
    w = gl.tensor([5.0, 5.0], requires_grad=other_requires_grad)
    _KeepsItsGradient.apply(x + w).sum().backward()
    _KeepsItsGradient.apply(x + w).sum().backward()
    assert [k.tolist() for k in _KeepsItsGradient.kept] == [[1.0, 1.0], [1.0, 1.0]]
    assert x.grad.tolist() == [2.0, 2.0]
    if other_requires_grad:
        assert w.grad.tolist() == [2.0, 2.0]


def test_a_backward_returning_the_wrong_number_of_gradients_is_an_error():
    from gradlog.autograd.function import Op

    class Twice(Op):  # a built-in-style op whose backward is wrong on purpose
        node_name = "TwiceBackward0"

        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2, g

    x = gl.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match=r"function TwiceBackward0 returned an incorrect "
                       r"number of gradients \(expected 1, got 2\)"):
        Twice.apply(x).sum().backward()
