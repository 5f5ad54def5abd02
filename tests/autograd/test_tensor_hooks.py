"""Tensor hooks, retain_grad, post-accumulate hooks and RemovableHandle: the issue's scenarios
with PyTorch's values, and the handle's weak-reference hygiene."""

import gc
import math
import weakref

import pytest

import gradlog as gl


def test_hook_prints_the_intermediate_gradient(capsys):
    x = gl.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: print("dz/dy =", g))
    z = y.pow(3).sum()
    z.backward()
    assert capsys.readouterr().out == "dz/dy = tensor([ 12.,  48., 108.])\n"
    assert x.grad.tolist() == [24.0, 96.0, 216.0] and z.item() == 288.0


def test_gradient_norm_monitor():
    norms = []
    w = gl.tensor([3.0, 4.0], requires_grad=True)
    w.register_hook(lambda g: norms.append(g.norm().item()))
    (w * w).sum().backward()
    assert norms == [10.0] and w.grad.tolist() == [6.0, 8.0]


def test_scaling_hook_then_removed():
    x = gl.tensor([1.0, 2.0], requires_grad=True)
    handle = x.register_hook(lambda g: g * 0.5)
    (x * 4).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]
    handle.remove()
    x.grad = None
    (x * 4).sum().backward()
    assert x.grad.tolist() == [4.0, 4.0]


def test_hooks_save_gradients_to_a_dict_through_closures():
    grads, order = {}, []

    def save(name):
        def hook(g):
            grads[name] = g.item()
            order.append(name)
        return hook

    a = gl.tensor(2.0, requires_grad=True)
    b = a * 3
    c = b ** 2
    for name, t in (("b", b), ("c", c), ("a", a)):
        t.register_hook(save(name))
    c.backward()
    assert grads == {"c": 1.0, "b": 12.0, "a": 36.0}
    assert order == ["c", "b", "a"] and a.grad.item() == 36.0


def test_hook_zeroes_negative_gradients_via_a_clone():
    x = gl.tensor([1.0, 1.0, 1.0], requires_grad=True)
    y = x * 1

    def clip(g):
        g = g.clone()
        g[g < 0] = 0
        return g

    y.register_hook(clip)
    (y * gl.tensor([1.0, -2.0, 3.0])).sum().backward()
    assert x.grad.tolist() == [1.0, 0.0, 3.0]


def test_hook_raising_on_nan_stops_backward():
    x = gl.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2

    def check(g):
        if gl.isnan(g).any():
            raise RuntimeError("NaN gradient detected")

    y.register_hook(check)
    with pytest.raises(RuntimeError, match="^NaN gradient detected$"):
        (y * gl.tensor([1.0, math.nan])).sum().backward()
    assert x.grad is None


def test_leaf_hook_doubles_the_accumulated_gradient():
    v = gl.tensor([0.0, 0.0, 0.0], requires_grad=True)
    v.register_hook(lambda g: g * 2)
    v.backward(gl.tensor([1.0, 2.0, 3.0]))
    assert v.grad.tolist() == [2.0, 4.0, 6.0]


def test_hooks_run_in_registration_order_and_chain():
    seen = []
    x = gl.tensor([1.0], requires_grad=True)
    y = x * 3
    y.register_hook(lambda g: seen.append(g.item()) or g + 1)
    y.register_hook(lambda g: seen.append(g.item()) or g * 10)
    y.register_hook(lambda g: seen.append(g.item()))
    y.backward()
    assert seen == [1.0, 2.0, 20.0] and x.grad.item() == 60.0


@pytest.mark.parametrize("retain_first", [True, False])
def test_retain_grad_stores_the_value_after_all_hooks(retain_first):
    x = gl.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    if retain_first:
        y.retain_grad()
    y.register_hook(lambda g: g * 10)
    if not retain_first:
        y.retain_grad()
    (y ** 2).sum().backward()
    assert y.retains_grad and not x.retains_grad
    assert y.grad.tolist() == [40.0, 80.0] and x.grad.tolist() == [80.0, 160.0]


def test_replacement_of_another_shape_or_dtype_is_refused():
    def bad(g):
        return gl.zeros(3)

    def badt(g):
        return g.double()

    x = gl.tensor([1.0, 2.0], requires_grad=True)
    x.register_hook(bad)
    with pytest.raises(RuntimeError,
                       match=r"^hook 'bad' has changed the size of value: expected \(2,\), got"):
        (x * 2).sum().backward()
    assert x.grad is None
    y = gl.tensor([1.0, 2.0], requires_grad=True)
    y.register_hook(badt)
    with pytest.raises(RuntimeError, match=r"^hook 'badt' has changed the type of value \(was "
                                           r"gradlog.FloatTensor got gradlog.DoubleTensor\)"):
        (y * 2).sum().backward()


def test_hook_on_a_tensor_that_does_not_require_grad_is_refused():
    with pytest.raises(RuntimeError, match="cannot register a hook on a tensor that doesn't "
                                           "require gradient"):
        gl.tensor([1.0]).register_hook(lambda g: g)


def test_exception_in_a_hook_propagates_unchanged():
    class Boom(Exception):
        pass

    err = Boom("boom")
    x = gl.tensor([1.0], requires_grad=True)
    x.register_hook(lambda g: (_ for _ in ()).throw(err))
    with pytest.raises(Boom) as info:
        (x * 2).backward()
    assert info.value is err and x.grad is None


def test_post_accumulate_hook_sees_the_tensor_after_accumulation():
    seen = []
    x = gl.tensor([1.0], requires_grad=True)
    x.register_post_accumulate_grad_hook(lambda p: seen.append((p is x, p.grad.item())))
    (x * 2 + x * 3).backward()
    (x * 3).backward()
    gl.autograd.grad(x * 4, x)  # nothing accumulated: the hook does not fire
    assert seen == [(True, 5.0), (True, 8.0)]


def test_post_accumulate_hook_as_an_optimizer_step():
    v = gl.tensor([0.0, 0.0, 0.0], requires_grad=True)
    v.register_post_accumulate_grad_hook(lambda p: p.add_(p.grad, alpha=-0.01))
    v.backward(gl.tensor([1.0, 2.0, 3.0]))
    assert v.detach().tolist() == pytest.approx([-0.01, -0.02, -0.03])
    assert v.grad.tolist() == [1.0, 2.0, 3.0]


def test_post_accumulate_hook_must_return_none_and_is_for_leaves_only():
    v = gl.tensor([1.0], requires_grad=True)
    v.register_post_accumulate_grad_hook(lambda p: p * 2)
    with pytest.raises(RuntimeError, match="Tensor post accumulate grad hooks should return None"):
        (v * 2).backward()
    y = gl.tensor([1.0], requires_grad=True) * 2
    with pytest.raises(RuntimeError, match="cannot be registered on non-leaf tensors"):
        y.register_post_accumulate_grad_hook(print)


def test_handle_remove_is_idempotent_and_a_context_manager():
    x = gl.tensor([1.0], requires_grad=True)
    handle = x.register_hook(lambda g: g * 2)
    handle.remove()
    handle.remove()
    with x.register_hook(lambda g: g * 100):
        (x * 1).backward()
    assert x.grad.item() == 100.0
    x.grad = None
    (x * 1).backward()
    assert x.grad.item() == 1.0


def test_removed_hook_is_released():
    def hook(g):
        return g

    x = gl.tensor([1.0], requires_grad=True)
    handle = x.register_hook(hook)
    ref = weakref.ref(hook)
    handle.remove()
    del hook
    gc.collect()
    assert ref() is None


def test_handle_does_not_keep_the_tensor_or_its_hooks_alive():
    def hook(g):
        return g

    x = gl.tensor([1.0], requires_grad=True)
    handles = [x.register_hook(hook), x.register_post_accumulate_grad_hook(lambda p: None)]
    tensor_ref, hook_ref = weakref.ref(x), weakref.ref(hook)
    del x, hook
    gc.collect()
    assert tensor_ref() is None and hook_ref() is None
    for handle in handles:
        handle.remove()  # a no-op once the registry is gone


def test_hooks_of_an_intermediate_tensor_go_with_its_graph():
    def hook(g):
        return g

    x = gl.tensor([1.0], requires_grad=True)
    y = x * 2
    handle = y.register_hook(hook)
    y.backward()
    hook_ref = weakref.ref(hook)
    del y, hook
    gc.collect()
    assert hook_ref() is None
    handle.remove()
