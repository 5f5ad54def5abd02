"""In-place ops: version counters (shared by views), the errors PyTorch raises, and gradients
through in-place ops, in-place ops on views and index assignment."""

import pytest

import gradlog as gl

MODIFIED = ("one of the variables needed for gradient computation has been modified by an "
            "inplace operation")


def test_each_inplace_op_bumps_the_version_shared_with_views():
    x = gl.tensor([1.0, 2.0, 3.0])
    v, r = x[1:], x.view(3, 1)
    assert x._version == 0
    v.add_(1)
    assert (x._version, v._version, r._version) == (1, 1, 1)
    assert x.tolist() == [1.0, 3.0, 4.0]
    for op in (lambda: x.mul_(2), lambda: x.sub_(1), lambda: x.div_(2),
               lambda: x.clamp_(min=0.0), lambda: x.fill_(5), lambda: x.zero_(),
               lambda: x.copy_(gl.tensor([1.0, 2.0, 3.0]))):
        before = x._version
        op()
        assert x._version == before + 1
    x[0] = 7
    assert x._version == 9 and r._version == 9 and x.tolist() == [7.0, 2.0, 3.0]


def test_detach_shares_memory_and_version_counter():
    a = gl.tensor([1.0, 2.0], requires_grad=True)
    y = a.exp()
    d = y.detach()
    d[0] = 0
    assert y.tolist()[0] == 0.0 and y._version == 1
    with pytest.raises(RuntimeError, match=MODIFIED):
        y.sum().backward()


def test_inplace_on_a_leaf_that_requires_grad_is_refused():
    x = gl.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="^a leaf Variable that requires grad is being used "
                                           "in an in-place operation.$"):
        x.add_(1)
    with pytest.raises(RuntimeError, match="^a view of a leaf Variable that requires grad"):
        x[0].mul_(2)
    with pytest.raises(RuntimeError, match="^a view of a leaf Variable that requires grad"):
        x[1:] = 0
    with pytest.raises(RuntimeError, match="^a leaf Variable that requires grad"):
        x[[1]] = 0
    assert x.tolist() == [1.0, 2.0] and x._version == 0


def _exp_output_modified():
    y = gl.tensor([1.0, 2.0], requires_grad=True).exp()
    y.add_(1)
    return y


def _constant_modified_after_use():
    # c has no version counter when the product saves it: version 0 is implied
    c = gl.tensor([3.0, 4.0])
    y = gl.tensor([1.0, 2.0], requires_grad=True) * c
    c.add_(1)
    return y


@pytest.mark.parametrize("program, owner", [(_exp_output_modified, "which is output 0 of Exp, "),
                                            (_constant_modified_after_use, "")])
def test_modified_saved_tensor_is_reported_with_versions(program, owner):
    y = program()
    with pytest.raises(RuntimeError, match=MODIFIED + r": \[gradlog.FloatTensor \[2\]\], "
                       + owner + r"is at version 1; expected version 0 instead."):
        y.sum().backward()


def test_modified_input_of_a_mul_is_reported():
    b = gl.tensor([1.0, 2.0], requires_grad=True)
    c = b * 1
    d = c * b
    c.add_(1)
    with pytest.raises(RuntimeError, match="is at version 1; expected version 0 instead"):
        d.sum().backward()


def test_gradient_through_a_chain_of_inplace_ops():
    x = gl.tensor([1.0, -2.0, 3.0], requires_grad=True)
    y = x * 2
    y.mul_(x)         # 2x^2
    y.add_(x, alpha=3)  # 2x^2 + 3x
    y.clamp_(max=10.0)
    y.sub_(1).div_(2)
    assert y.tolist() == [2.0, 0.5, 4.5]
    assert y.grad_fn.name() == "DivBackward0"
    y.sum().backward()
    assert x.grad.tolist() == [3.5, -2.5, 0.0]  # (4x + 3) / 2 where not clamped


def test_inplace_on_a_view_updates_the_base_gradient():
    x = gl.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    y = x * 1
    y[1:3].mul_(10)
    assert y.tolist() == [1.0, 20.0, 30.0, 4.0]
    (y * gl.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
    assert x.grad.tolist() == [1.0, 20.0, 30.0, 4.0]


def test_inplace_through_a_transposed_view():
    a = gl.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    b = a.clone()
    b.t()[0].add_(a[0])  # column 0 of b += row 0 of a
    assert b.tolist() == [[2.0, 2.0], [5.0, 4.0]]
    b.sum().backward()
    assert a.grad.tolist() == [[2.0, 2.0], [1.0, 1.0]]


def test_masked_index_assignment_with_gradient():
    x = gl.tensor([-1.0, 2.0, -3.0, 4.0], requires_grad=True)
    y = x * 2
    y[y < 0] = 0
    y.sum().backward()
    assert x.grad.tolist() == [0.0, 2.0, 0.0, 2.0]


def test_index_assignment_of_a_tensor_that_requires_grad():
    v = gl.tensor([5.0, 6.0], requires_grad=True)
    z = gl.ones(4)
    z[[0, 3]] = v * v
    assert z.requires_grad and z.tolist() == [25.0, 1.0, 1.0, 36.0]
    (z * gl.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
    assert v.grad.tolist() == [10.0, 48.0]


def test_hooks_stay_with_the_value_before_an_inplace_op():
    seen = []
    x = gl.tensor([1.0], requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: seen.append(("h1", g.item())))
    y.mul_(3)
    y.register_hook(lambda g: seen.append(("h2", g.item())))
    (y * 5).backward()
    assert seen == [("h2", 5.0), ("h1", 15.0)] and x.grad.item() == 30.0


def test_inplace_op_that_needs_its_own_input_keeps_a_copy():
    # gradlog keeps the overwritten input when the op's backward needs it (y.mul_(y)), where
    # PyTorch refuses at backward time once y changes again: lenient, never wrong.
    x = gl.tensor([3.0], requires_grad=True)
    y = x * 1
    y.mul_(y)
    y.backward()
    assert x.grad.item() == 6.0


def test_a_constant_modified_before_use_is_saved_at_its_version():
    x = gl.tensor([1.0, 2.0], requires_grad=True)
    c = gl.tensor([3.0, 4.0])
    c.add_(1)
    y = x * c
    y.sum().backward(retain_graph=True)
    assert x.grad.tolist() == [4.0, 5.0]
    c.mul_(2)
    with pytest.raises(RuntimeError, match="is at version 2; expected version 1 instead"):
        y.sum().backward()
