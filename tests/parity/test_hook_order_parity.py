"""Relative order of hook kinds against PyTorch: a module's full backward (pre-)hooks between
the hooks of its output tensors and those of its inputs, and a leaf's tensor hooks, the
AccumulateGrad node's hooks and the post-accumulate-grad hooks (whose in-place edits of .grad
the node's post-hooks see)."""

import warnings

import pytest
from dual import assert_same

torch = pytest.importorskip("torch")


def _rec(log, name):
    return lambda *args: log.append(name)


def _hook_output(log):
    def forward_hook(module, args, out):
        out.register_hook(_rec(log, "fwd_out"))
    return forward_hook


def module_hooks_sit_between_output_and_input_tensor_hooks(L, log):
    for kind in ("identity", "linear", "no_input_grad"):
        m = L.nn.Identity() if kind == "identity" else L.nn.Linear(2, 2)
        x = L.ones(1, 2, requires_grad=kind != "no_input_grad")
        xin = x if kind == "no_input_grad" else x * 1
        if kind != "no_input_grad":
            xin.register_hook(_rec(log, "in_before"))
        m.register_full_backward_hook(_rec(log, "bwd"))
        m.register_full_backward_pre_hook(_rec(log, "bpre"))
        m.register_forward_hook(_hook_output(log))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (no input requires grad: PyTorch warns)
            out = m(xin)
            out.register_hook(_rec(log, "out"))
            if kind != "no_input_grad":
                xin.register_hook(_rec(log, "in_after"))
            if kind != "identity":
                m.weight.register_hook(_rec(log, "weight"))
            (out * 2).sum().backward()
        log.append("--")


def chained_modules_interleave_with_tensor_hooks(L, log):
    a, b = L.nn.Linear(2, 2), L.nn.Linear(2, 2)
    a.register_full_backward_hook(_rec(log, "a_bwd"))
    b.register_full_backward_hook(_rec(log, "b_bwd"))
    b.register_full_backward_pre_hook(_rec(log, "b_pre"))
    a.register_full_backward_pre_hook(_rec(log, "a_pre"))
    x = L.ones(1, 2, requires_grad=True)
    mid = a(x)
    mid.register_hook(_rec(log, "mid"))
    out = b(mid)
    out.register_hook(_rec(log, "out"))
    x.register_hook(_rec(log, "x"))
    x.register_post_accumulate_grad_hook(_rec(log, "x_post"))
    out.sum().backward()


def post_accumulate_hooks_run_between_the_sink_node_hooks(L, log):
    t = L.tensor([0.25, 0.5, 1.0], requires_grad=True)
    sink = t.view_as(t).grad_fn.next_functions[0][0]
    t.register_hook(lambda g: g.sub(2.0))
    sink.register_prehook(lambda go: (go[0].div(5.0),))

    def post(p):
        p.grad.add_(0.5)

    t.register_post_accumulate_grad_hook(post)

    def node_post(grad_inputs, grad_outputs):
        log.append(("node_post", grad_outputs[0], grad_outputs[0] is t.grad))
        t.grad = grad_outputs[0].mul(10)

    sink.register_hook(node_post)
    t.sum().backward()  # ((1 - 2) / 5 + 0.5) * 10: the node post-hook sees the edited .grad
    log.append(t.grad)
    t.sum().backward()  # .grad exists: the post-hook sees the incoming gradient only
    log.append(t.grad)


def leaf_hook_kinds_in_order_over_two_passes(L, log):
    t = L.tensor([1.0, 2.0], requires_grad=True)
    # (values are logged as clones: PyTorch decides by reference counts whether .grad takes
    # over the incoming gradient's memory, gradlog always does when .grad is empty)
    t.register_post_accumulate_grad_hook(lambda p: log.append(("post", p.grad.clone())))
    t.register_hook(lambda g: log.append(("pre", g.clone())) or g * 2)
    sink = t.view_as(t).grad_fn.next_functions[0][0]
    sink.register_prehook(lambda go: log.append(("node_pre", go[0].clone())))
    sink.register_hook(lambda gi, go: log.append(("node_post", go[0].clone())))
    for _ in range(2):
        (t * 3).sum().backward()


PROGRAMS = [module_hooks_sit_between_output_and_input_tensor_hooks,
            chained_modules_interleave_with_tensor_hooks,
            post_accumulate_hooks_run_between_the_sink_node_hooks,
            leaf_hook_kinds_in_order_over_two_passes]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_same_observations_as_pytorch(program):
    assert_same(program)
