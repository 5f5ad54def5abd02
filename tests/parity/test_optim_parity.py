"""Optimizers and schedulers against PyTorch: the same parameters and gradients, step after
step, in float64 and float32, over the options that change the update; state dicts in
PyTorch's format; step-hook semantics."""

import importlib

import numpy as np
import pytest
from dual import assert_same

import gradlog as gl
from gradlog import nn, optim
from gradlog.optim import lr_scheduler as glS
from gradlog.optim import optimizer as gl_optimizer_module

torch = pytest.importorskip("torch")
tS = torch.optim.lr_scheduler
torch_optimizer_module = importlib.import_module("torch.optim.optimizer")

SHAPES = [(4, 3), (3,), (2, 2, 2)]


def make_params(L, arrays):
    Param = nn.Parameter if L is gl else torch.nn.Parameter
    return [Param(L.tensor(a.copy())) for a in arrays]


def grads_for(steps, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(s).astype(dtype) for s in SHAPES] for _ in range(steps)]


def trajectory(L, cls_name, kwargs, dtype, steps=25, groups=None, skip=()):
    """Parameter values after every step. ``groups``: per-group option overrides (the
    parameters are dealt out to the groups in order); ``skip``: (step, param) pairs whose
    gradient is None."""
    rng = np.random.default_rng(1)
    params = make_params(L, [rng.standard_normal(s).astype(dtype) for s in SHAPES])
    if groups is None:
        spec = params
    else:
        spec = [{"params": params[i::len(groups)], **g} for i, g in enumerate(groups)]
    opt = getattr(L.optim, cls_name)(spec, **kwargs)
    out = []
    for k, grads in enumerate(grads_for(steps, dtype)):
        for i, (p, g) in enumerate(zip(params, grads)):
            p.grad = None if (k, i) in skip else L.tensor(g)
        opt.step()
        out.append([p.detach().numpy().copy() for p in params])
    return out, opt, params


def assert_trajectories_match(cls_name, kwargs, dtype, **kw):
    ours, opt, params = trajectory(gl, cls_name, kwargs, dtype, **kw)
    theirs, _, _ = trajectory(torch, cls_name, kwargs, dtype, **kw)
    rtol, atol = (1e-12, 1e-14) if dtype == np.float64 else (2e-6, 2e-7)
    for step, (a, b) in enumerate(zip(ours, theirs)):
        for x, y in zip(a, b):
            assert x.dtype == y.dtype
            np.testing.assert_allclose(x, y, rtol=rtol, atol=atol, err_msg=f"step {step}")
    return opt, params


SGD_CASES = [
    {"lr": 0.1},
    {"lr": 0.1, "momentum": 0.9},
    {"lr": 0.05, "momentum": 0.9, "dampening": 0.3},
    {"lr": 0.05, "momentum": 0.8, "nesterov": True},
    {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.01, "nesterov": True},
    {"lr": 0.1, "weight_decay": 0.1, "maximize": True},
    {"lr": 0.02, "momentum": 0.5, "dampening": 0.5, "weight_decay": 0.05, "maximize": True},
]
ADAM_CASES = [
    {},
    {"lr": 0.01, "betas": (0.8, 0.99)},
    {"lr": 0.01, "amsgrad": True},
    {"lr": 0.01, "weight_decay": 0.1},
    {"lr": 0.005, "weight_decay": 0.1, "amsgrad": True, "maximize": True},
    {"lr": 0.01, "betas": (0.3, 0.6), "eps": 1e-3},
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("kwargs", SGD_CASES, ids=str)
def test_sgd_matches_pytorch(kwargs, dtype):
    assert_trajectories_match("SGD", kwargs, dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("cls_name", ["Adam", "AdamW"])
@pytest.mark.parametrize("kwargs", ADAM_CASES, ids=str)
def test_adam_and_adamw_match_pytorch(cls_name, kwargs, dtype):
    assert_trajectories_match(cls_name, kwargs, dtype)


@pytest.mark.parametrize("cls_name,kwargs", [
    ("SGD", {"lr": 0.1, "momentum": 0.9}),
    ("Adam", {"lr": 0.01}),
    ("AdamW", {"lr": 0.01, "amsgrad": True}),
])
def test_param_groups_with_own_options_and_none_grads_match_pytorch(cls_name, kwargs):
    groups = [{"lr": 0.3}, {"weight_decay": 0.2}]
    skip = {(0, 1), (3, 0), (3, 1), (3, 2), (7, 2)}
    assert_trajectories_match(cls_name, kwargs, np.float32, groups=groups, skip=skip)


def state_dict_values(sd):
    state = {k: {n: (v.detach().numpy() if hasattr(v, "detach") else v) for n, v in s.items()}
             for k, s in sd["state"].items()}
    return state, sd["param_groups"]


@pytest.mark.parametrize("cls_name,kwargs", [
    ("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True}),
    ("Adam", {"lr": 0.01, "amsgrad": True}),
    ("AdamW", {"lr": 0.01}),
])
def test_state_dict_matches_pytorch_format(cls_name, kwargs):
    _, ours, _ = trajectory(gl, cls_name, kwargs, np.float32, steps=3,
                            groups=[{}, {"lr": 0.5}], skip={(0, 2), (1, 2), (2, 2)})
    _, theirs, _ = trajectory(torch, cls_name, kwargs, np.float32, steps=3,
                              groups=[{}, {"lr": 0.5}], skip={(0, 2), (1, 2), (2, 2)})
    (s_ours, g_ours), (s_theirs, g_theirs) = (state_dict_values(o.state_dict())
                                              for o in (ours, theirs))
    assert sorted(s_ours) == sorted(s_theirs) == [0, 2]  # params[2] (index 1) never stepped
    for k in s_theirs:
        assert sorted(s_ours[k]) == sorted(s_theirs[k])
        for name in s_theirs[k]:
            np.testing.assert_allclose(s_ours[k][name], s_theirs[k][name], rtol=2e-6)
            assert np.asarray(s_ours[k][name]).dtype == np.asarray(s_theirs[k][name]).dtype
    assert len(g_ours) == len(g_theirs)
    for a, b in zip(g_ours, g_theirs):
        assert set(a) <= set(b)  # PyTorch adds foreach/fused/... switches gradlog has not
        assert {k: a[k] for k in a} == {k: b[k] for k in a}


@pytest.mark.parametrize("cls_name,kwargs", [
    ("SGD", {"lr": 0.1, "momentum": 0.9, "dampening": 0.1}),
    ("Adam", {"lr": 0.01, "amsgrad": True, "weight_decay": 0.01}),
])
def test_pytorch_state_dict_loads_into_gradlog_and_continues(cls_name, kwargs):
    """A PyTorch optimizer's state (tensors converted to arrays) restores a gradlog one."""
    _, t_opt, t_params = trajectory(torch, cls_name, kwargs, np.float64, steps=4)
    sd = t_opt.state_dict()
    converted = {
        "state": {k: {n: gl.tensor(v.numpy()) if torch.is_tensor(v) else v
                      for n, v in s.items()} for k, s in sd["state"].items()},
        "param_groups": [{k: v for k, v in g.items()
                          if k not in ("foreach", "differentiable", "fused", "capturable")}
                         for g in sd["param_groups"]],
    }
    g_params = make_params(gl, [p.detach().numpy() for p in t_params])
    g_opt = getattr(optim, cls_name)(g_params, **kwargs)
    g_opt.load_state_dict(converted)
    for grads in grads_for(5, np.float64, seed=3):
        for gp, tp, g in zip(g_params, t_params, grads):
            gp.grad, tp.grad = gl.tensor(g), torch.tensor(g)
        g_opt.step()
        t_opt.step()
    for gp, tp in zip(g_params, t_params):
        np.testing.assert_allclose(gp.detach().numpy(), tp.detach().numpy(), rtol=1e-12)


# -- step hooks --------------------------------------------------------------------------------

def hook_program(L, log):
    p = (nn.Parameter if L is gl else torch.nn.Parameter)(L.tensor([1.0, 2.0]))
    opt = L.optim.SGD([p], lr=0.5)
    glob = gl_optimizer_module if L is gl else torch_optimizer_module

    def pre(o, args, kwargs):
        log.append(("pre", len(args), args[0] is o, sorted(kwargs), p.detach().clone()))

    def replacing_pre(o, args, kwargs):
        log.append("replacing")
        return args, {"closure": lambda: 42}

    def post(o, args, kwargs):
        log.append(("post", sorted(kwargs), p.detach().clone()))

    handles = [glob.register_optimizer_step_pre_hook(lambda o, a, k: log.append("gpre")),
               opt.register_step_pre_hook(pre),
               opt.register_step_post_hook(post),
               glob.register_optimizer_step_post_hook(lambda o, a, k: log.append("gpost"))]
    try:
        p.grad = L.tensor([1.0, 1.0])
        log.append(opt.step())
        r = opt.register_step_pre_hook(replacing_pre)
        log.append(opt.step())
        r.remove()
        handles[1].remove()
        log.append(opt.step())
    finally:
        for h in handles:
            h.remove()
    log.append(opt.step())
    log.append(p.detach().clone())


def test_step_hooks_match_pytorch():
    assert_same(hook_program)


# -- schedulers --------------------------------------------------------------------------------

SCHEDULERS = [
    ("StepLR", {"step_size": 7, "gamma": 0.3}),
    ("MultiStepLR", {"milestones": [10, 30, 30, 75], "gamma": 0.5}),
    ("ExponentialLR", {"gamma": 0.97}),
    ("CosineAnnealingLR", {"T_max": 23, "eta_min": 1e-4}),
    ("CosineAnnealingLR", {"T_max": 100}),
    ("LinearLR", {"start_factor": 0.05, "end_factor": 0.9, "total_iters": 40}),
    ("LinearLR", {}),
    ("LambdaLR", {"lr_lambda": lambda e: 0.99 ** e * (1 + e % 3)}),
    ("OneCycleLR", {"max_lr": [0.5, 0.2], "total_steps": 101}),
    ("OneCycleLR", {"max_lr": 0.4, "total_steps": 101, "anneal_strategy": "linear",
                    "three_phase": True, "pct_start": 0.25, "div_factor": 10.0}),
    ("OneCycleLR", {"max_lr": 0.4, "epochs": 10, "steps_per_epoch": 11,
                    "cycle_momentum": False, "final_div_factor": 100.0}),
]


def schedule(L, mod, name, kwargs, cls_name, steps=100):
    Param = nn.Parameter if L is gl else torch.nn.Parameter
    groups = [{"params": [Param(L.zeros(1))], "lr": 0.1},
              {"params": [Param(L.zeros(1))], "lr": 0.03}]
    opt_kwargs = {"momentum": 0.9} if cls_name == "SGD" else {}
    opt = getattr(L.optim, cls_name)(groups, **opt_kwargs)
    sched = getattr(mod, name)(opt, **kwargs)
    out = []
    for _ in range(steps):
        opt.step()
        sched.step()
        g = opt.param_groups
        out.append([x["lr"] for x in g] + [x.get("momentum", x.get("betas", (0,))[0]) for x in g]
                   + sched.get_last_lr())
    return np.array(out, dtype=np.float64)


@pytest.mark.parametrize("cls_name", ["SGD", "Adam"])
@pytest.mark.parametrize("name,kwargs", SCHEDULERS, ids=lambda v: str(v)[:40])
def test_scheduler_matches_pytorch_over_100_steps(name, kwargs, cls_name):
    ours = schedule(gl, glS, name, kwargs, cls_name)
    theirs = schedule(torch, tS, name, kwargs, cls_name)
    np.testing.assert_allclose(ours, theirs, rtol=1e-7, atol=1e-12)
