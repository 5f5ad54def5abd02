"""The Optimizer base: parameter groups, zero_grad, step hooks, skipping None gradients, state
dicts and their validation (values worked out by hand; PyTorch comparisons live in
tests/parity/test_optim_parity.py)."""

import warnings

import numpy as np
import pytest

import gradlog as gl
from gradlog import nn, optim
from gradlog.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)


def param(*values):
    return nn.Parameter(gl.tensor(np.array(values, dtype=np.float32)))


def with_grad(p, *values):
    p.grad = gl.tensor(np.array(values, dtype=np.float32))
    return p


# -- construction and parameter groups ---------------------------------------------------------

def test_params_from_tensors_make_one_group_with_defaults():
    a, b = param(1.0), param(2.0, 3.0)
    opt = optim.SGD([a, b], lr=0.5, momentum=0.9)
    assert len(opt.param_groups) == 1
    group = opt.param_groups[0]
    assert len(group["params"]) == 2
    assert group["params"][0] is a and group["params"][1] is b
    assert (group["lr"], group["momentum"], group["dampening"], group["weight_decay"],
            group["nesterov"], group["maximize"]) == (0.5, 0.9, 0, 0, False, False)


def test_param_groups_from_dicts_override_defaults():
    a, b = param(1.0), param(2.0)
    opt = optim.SGD([{"params": [a]}, {"params": b, "lr": 0.01}], lr=0.1)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.01]
    assert opt.param_groups[1]["params"][0] is b  # a single tensor becomes a list


def test_named_parameters_record_param_names():
    model = nn.Module()
    model.w = param(1.0)
    opt = optim.SGD(model.named_parameters(), lr=0.1)
    assert opt.param_groups[0]["param_names"] == ["w"]
    assert opt.param_groups[0]["params"][0] is model.w


def test_add_param_group_rejects_parameter_already_optimized():
    a, b = param(1.0), param(2.0)
    opt = optim.SGD([a], lr=0.1)
    with pytest.raises(ValueError, match="some parameters appear in more than one parameter"):
        opt.add_param_group({"params": [b, a]})
    opt.add_param_group({"params": [b], "lr": 0.2})
    assert opt.param_groups[1]["lr"] == 0.2 and opt.param_groups[1]["momentum"] == 0


def test_construction_errors_match_pytorch():
    a = param(1.0)
    with pytest.raises(ValueError, match="optimizer got an empty parameter list"):
        optim.SGD([], lr=0.1)
    with pytest.raises(TypeError, match="should be an iterable of Tensors or dicts"):
        optim.SGD(a, lr=0.1)
    with pytest.raises(TypeError, match="ordering of tensors in sets"):
        optim.SGD([{"params": {a}}], lr=0.1)
    with pytest.raises(TypeError, match="optimizer can only optimize Tensors, but one of the "
                                        "params is int"):
        optim.SGD([a, 3], lr=0.1)
    with pytest.raises(ValueError, match="can't optimize a non-leaf Tensor"):
        optim.SGD([a * 2], lr=0.1)
    with pytest.raises(ValueError, match=r"^Invalid learning rate: -1$"):
        optim.SGD([a], lr=-1)
    with pytest.raises(ValueError, match="Invalid momentum value: -0.5"):
        optim.SGD([a], momentum=-0.5)
    with pytest.raises(ValueError, match="Invalid weight_decay value: -0.1"):
        optim.SGD([a], weight_decay=-0.1)
    with pytest.raises(ValueError, match="Nesterov momentum requires a momentum and zero"):
        optim.SGD([a], nesterov=True)
    with pytest.raises(ValueError, match="Invalid learning rate: -0.1"):
        optim.Adam([a], lr=-0.1)
    with pytest.raises(ValueError, match="Invalid epsilon value: -1e-08"):
        optim.Adam([a], eps=-1e-8)
    with pytest.raises(ValueError, match="Invalid beta parameter at index 0: 1.0"):
        optim.Adam([a], betas=(1.0, 0.9))
    with pytest.raises(ValueError, match="Invalid beta parameter at index 1: -0.1"):
        optim.AdamW([a], betas=(0.9, -0.1))
    with pytest.raises(ValueError, match="Invalid weight_decay value: -1"):
        optim.AdamW([a], weight_decay=-1)


def test_duplicate_parameters_in_one_group_warn():
    a = param(1.0)
    with pytest.warns(UserWarning, match="duplicate parameters"):
        optim.SGD([a, a], lr=0.1)


# -- zero_grad ---------------------------------------------------------------------------------

def test_zero_grad_sets_none_by_default_or_zeros_in_place():
    a = with_grad(param(1.0, 2.0), 3.0, 4.0)
    opt = optim.SGD([a], lr=0.1)
    g = a.grad
    opt.zero_grad(set_to_none=False)
    assert a.grad is g and a.grad.tolist() == [0.0, 0.0]
    opt.zero_grad()
    assert a.grad is None


# -- step semantics ----------------------------------------------------------------------------

def test_sgd_plain_step_values():
    a = with_grad(param(1.0, 2.0), 0.5, -1.0)
    optim.SGD([a], lr=0.1).step()
    np.testing.assert_allclose(a.detach().numpy(), [0.95, 2.1], rtol=1e-6)
    assert a.dtype == gl.float32


def test_step_updates_in_place_and_bumps_version():
    a = with_grad(param(1.0), 1.0)
    data = a.detach().numpy()
    version = a._version
    optim.Adam([a], lr=0.1).step()
    assert a.detach().numpy() is data or np.shares_memory(a.detach().numpy(), data)
    assert a._version > version


def test_parameters_without_grad_are_skipped_and_state_untouched():
    a = with_grad(param(1.0), 1.0)
    b = with_grad(param(5.0), 1.0)
    opt = optim.Adam([a, b], lr=0.1)
    opt.step()
    exp_avg_b = opt.state[b]["exp_avg"].tolist()
    b.grad = None
    before_b = b.tolist()
    opt.step()
    assert b.tolist() == before_b
    assert opt.state[b]["step"].item() == 1.0
    assert opt.state[b]["exp_avg"].tolist() == exp_avg_b
    assert opt.state[a]["step"].item() == 2.0


def test_all_grads_none_skips_the_whole_step():
    """The plugin framework's SkipStep sets every grad to None; nothing may change."""
    a = with_grad(param(1.0, -1.0), 1.0, 2.0)
    opt = optim.SGD([a], lr=0.1, momentum=0.9, weight_decay=0.1)
    opt.step()
    snapshot = (a.tolist(), opt.state[a]["momentum_buffer"].tolist())
    a.grad = None
    opt.step()
    assert (a.tolist(), opt.state[a]["momentum_buffer"].tolist()) == snapshot


def test_sgd_without_momentum_keeps_no_state():
    a = with_grad(param(1.0), 1.0)
    opt = optim.SGD([a], lr=0.1)
    opt.step()
    assert opt.state_dict()["state"] == {}


def test_step_does_not_record_a_graph_and_closure_runs_with_grad():
    a = param(2.0)
    opt = optim.SGD([a], lr=0.1)

    def closure():
        opt.zero_grad()
        loss = (a * a).sum()
        assert gl.is_grad_enabled()
        loss.backward()
        return loss

    with gl.no_grad():
        loss = opt.step(closure)
    assert loss.item() == 4.0
    assert a.grad_fn is None and a.is_leaf
    np.testing.assert_allclose(a.tolist(), [1.6], rtol=1e-6)


# -- step hooks --------------------------------------------------------------------------------

def test_step_hooks_fire_in_pytorch_order_with_optimizer_in_args():
    a = with_grad(param(1.0), 1.0)
    opt = optim.SGD([a], lr=0.1)
    calls = []
    handles = [
        opt.register_step_pre_hook(lambda o, args, kw: calls.append(("pre1", args, kw))),
        opt.register_step_pre_hook(lambda o, args, kw: calls.append(("pre2", a.tolist()))),
        opt.register_step_post_hook(lambda o, args, kw: calls.append(("post", a.tolist()))),
        register_optimizer_step_pre_hook(lambda o, args, kw: calls.append(("gpre",))),
        register_optimizer_step_post_hook(lambda o, args, kw: calls.append(("gpost",))),
    ]
    try:
        opt.step()
    finally:
        for h in handles:
            h.remove()
    assert [c[0] for c in calls] == ["gpre", "pre1", "pre2", "post", "gpost"]
    assert calls[1][1] == (opt,) and calls[1][2] == {}
    assert calls[2][1] == [1.0] and calls[3][1] == pytest.approx([0.9])


def test_pre_hook_can_replace_args_and_kwargs():
    a = with_grad(param(1.0), 1.0)
    opt = optim.SGD([a], lr=0.1)
    seen = []

    def closure():
        seen.append("closure")
        return 7.0

    opt.register_step_pre_hook(lambda o, args, kw: (args, {"closure": closure}))
    assert opt.step() == 7.0
    assert seen == ["closure"]


def test_pre_hook_returning_garbage_raises():
    a = with_grad(param(1.0), 1.0)
    opt = optim.SGD([a], lr=0.1)
    opt.register_step_pre_hook(lambda o, args, kw: 3)
    with pytest.raises(RuntimeError, match=r"must return None or a tuple of \(new_args, "
                                           r"new_kwargs\), but got 3"):
        opt.step()


def test_removed_hooks_do_not_fire_and_remove_is_idempotent():
    a = with_grad(param(1.0), 1.0)
    opt = optim.Adam([a])
    calls = []
    pre = opt.register_step_pre_hook(lambda *args: calls.append("pre"))
    post = opt.register_step_post_hook(lambda *args: calls.append("post"))
    opt.step()
    pre.remove()
    pre.remove()
    with post:
        opt.step()
    opt.step()
    assert calls == ["pre", "post", "post"]
    assert len(opt._optimizer_step_pre_hooks) == 0 and len(opt._optimizer_step_post_hooks) == 0


def test_global_hooks_see_every_optimizer_until_removed():
    a, b = with_grad(param(1.0), 1.0), with_grad(param(1.0), 1.0)
    seen = []
    handle = register_optimizer_step_post_hook(lambda o, args, kw: seen.append(type(o).__name__))
    try:
        optim.SGD([a], lr=0.1).step()
        optim.AdamW([b]).step()
    finally:
        handle.remove()
    optim.SGD([a], lr=0.1).step()
    assert seen == ["SGD", "AdamW"]


def test_hooks_fire_once_when_a_subclass_step_calls_super():
    class Counting(optim.SGD):
        def step(self, closure=None):
            self.calls = getattr(self, "calls", 0) + 1
            return super().step(closure)

    a = with_grad(param(1.0), 1.0)
    opt = Counting([a], lr=0.1)
    fired = []
    opt.register_step_pre_hook(lambda *args: fired.append("pre"))
    opt.register_step_post_hook(lambda *args: fired.append("post"))
    opt.step()
    assert fired == ["pre", "post"] and opt.calls == 1
    np.testing.assert_allclose(a.tolist(), [0.9], rtol=1e-6)


# -- state dicts -------------------------------------------------------------------------------

def test_state_dict_uses_indices_across_groups():
    a, b, c = (with_grad(param(1.0), 1.0) for _ in range(3))
    opt = optim.SGD([{"params": [a, b]}, {"params": [c], "lr": 0.5}], lr=0.1, momentum=0.9)
    opt.step()
    sd = opt.state_dict()
    assert [g["params"] for g in sd["param_groups"]] == [[0, 1], [2]]
    assert sorted(sd["state"]) == [0, 1, 2]
    assert set(sd["state"][2]) == {"momentum_buffer"}
    assert sd["param_groups"][1]["lr"] == 0.5
    assert "params" in opt.param_groups[0] and opt.param_groups[0]["params"][0] is a


def test_load_state_dict_validates_groups():
    a, b = param(1.0), param(2.0)
    sd = optim.SGD([a, b], lr=0.1).state_dict()
    with pytest.raises(ValueError, match="different number of parameter groups"):
        optim.SGD([{"params": [a]}, {"params": [b]}], lr=0.1).load_state_dict(sd)
    with pytest.raises(ValueError, match="doesn't match the size of optimizer's group"):
        optim.SGD([a], lr=0.1).load_state_dict(sd)


def test_load_state_dict_restores_options_and_copies_state():
    a = with_grad(param(1.0, 2.0), 0.5, 0.5)
    src = optim.Adam([a], lr=0.01, betas=(0.8, 0.9), amsgrad=True)
    src.step()
    b = param(1.0, 2.0)
    dst = optim.Adam([b], lr=0.5)
    dst.load_state_dict(src.state_dict())
    group = dst.param_groups[0]
    assert group["lr"] == 0.01 and group["betas"] == (0.8, 0.9) and group["amsgrad"] is True
    assert group["params"][0] is b
    state = dst.state[b]
    assert state["step"].item() == 1.0
    assert state["exp_avg"] is not src.state[a]["exp_avg"]
    np.testing.assert_array_equal(state["exp_avg"].numpy(), src.state[a]["exp_avg"].numpy())


def test_load_state_dict_casts_state_to_parameter_dtype():
    a = with_grad(param(1.0), 1.0)
    src = optim.SGD([a], lr=0.1, momentum=0.9)
    src.step()
    b = nn.Parameter(gl.tensor([1.0], dtype=gl.float64))
    dst = optim.SGD([b], lr=0.1, momentum=0.9)
    dst.load_state_dict(src.state_dict())
    assert dst.state[b]["momentum_buffer"].dtype == gl.float64


def test_state_dict_hooks():
    a = param(1.0)
    opt = optim.SGD([a], lr=0.1)
    calls = []
    opt.register_state_dict_pre_hook(lambda o: calls.append("pre"))
    opt.register_state_dict_post_hook(lambda o, sd: {**sd, "extra": 1})
    opt.register_load_state_dict_pre_hook(lambda o, sd: calls.append("load_pre"))
    opt.register_load_state_dict_post_hook(lambda o: calls.append("load_post"))
    sd = opt.state_dict()
    assert sd["extra"] == 1
    opt.load_state_dict(sd)
    assert calls == ["pre", "load_pre", "load_post"]


def test_repr_lists_groups():
    opt = optim.SGD([param(1.0)], lr=0.1)
    text = repr(opt)
    assert text.startswith("SGD (\nParameter Group 0\n    dampening: 0\n")
    assert "    lr: 0.1\n" in text and text.endswith(")")


def test_no_warnings_in_a_plain_loop():
    a = param(1.0, 2.0)
    opt = optim.AdamW([a], lr=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            opt.zero_grad()
            (a * a).sum().backward()
            opt.step()


# -- resuming from a state dict ----------------------------------------------------------------

RESUME_CASES = [
    (optim.SGD, {"lr": 0.1, "momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01}),
    (optim.SGD, {"lr": 0.1, "momentum": 0.9, "nesterov": True, "maximize": True}),
    (optim.Adam, {"lr": 0.01, "amsgrad": True, "weight_decay": 0.1}),
    (optim.AdamW, {"lr": 0.01, "betas": (0.8, 0.9)}),
]


@pytest.mark.parametrize("through_file", [False, True])
@pytest.mark.parametrize("cls,kwargs", RESUME_CASES, ids=lambda v: getattr(v, "__name__", ""))
def test_state_dict_round_trip_continues_bit_identically(cls, kwargs, through_file, tmp_path):
    rng = np.random.default_rng(0)
    init = [rng.standard_normal(s).astype(np.float32) for s in ((3, 2), (2,))]
    grads = [[rng.standard_normal(a.shape).astype(np.float32) for a in init]
             for _ in range(12)]

    def run(params, opt, steps):
        for gs in steps:
            for p, g in zip(params, gs):
                p.grad = gl.tensor(g)
            opt.step()

    def fresh():
        params = [nn.Parameter(gl.tensor(a.copy())) for a in init]
        return params, cls([{"params": params[:1]}, {"params": params[1:], "lr": 0.05}],
                           **kwargs)

    full_params, full_opt = fresh()
    run(full_params, full_opt, grads)

    params, opt = fresh()
    run(params, opt, grads[:5])
    sd = {"params": [p.detach().clone() for p in params], "optimizer": opt.state_dict()}
    if through_file:
        gl.save(sd, tmp_path / "opt.ckpt")
        sd = gl.load(tmp_path / "opt.ckpt")
    params2, opt2 = fresh()
    for p, saved in zip(params2, sd["params"]):
        with gl.no_grad():
            p.copy_(saved)
    opt2.load_state_dict(sd["optimizer"])
    assert opt2.param_groups[1]["lr"] == 0.05
    run(params2, opt2, grads[5:])
    for a, b in zip(params2, full_params):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
