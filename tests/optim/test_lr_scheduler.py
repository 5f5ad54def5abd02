"""Learning-rate schedulers: values against their closed forms, chaining, momentum cycling,
state dicts (also through gl.save / gl.load) and warnings. Bit-level agreement with PyTorch is
in tests/parity/test_optim_parity.py."""

import math
import warnings

import numpy as np
import pytest

import gradlog as gl
from gradlog import nn, optim
from gradlog.optim import lr_scheduler as S


def make_opt(cls=optim.SGD, lrs=(0.1,), **kw):
    groups = [{"params": [nn.Parameter(gl.zeros(2))], "lr": lr} for lr in lrs]
    return cls(groups, **kw)


def run(sched, steps):
    """The lr of every group before each of ``steps`` optimizer steps."""
    out = []
    for _ in range(steps):
        out.append([g["lr"] for g in sched.optimizer.param_groups])
        sched.optimizer.step()
        sched.step()
    return np.array(out)


def test_step_lr_decays_every_step_size():
    lrs = run(S.StepLR(make_opt(lrs=(1.0, 0.5)), step_size=3, gamma=0.1), 10)
    expected = [[b * 0.1 ** (e // 3) for b in (1.0, 0.5)] for e in range(10)]
    np.testing.assert_allclose(lrs, expected, rtol=1e-12)


def test_multistep_lr_with_repeated_milestone():
    lrs = run(S.MultiStepLR(make_opt(lrs=(1.0,)), milestones=[2, 5, 5], gamma=0.5), 8)[:, 0]
    np.testing.assert_allclose(lrs, [1, 1, .5, .5, .5, .125, .125, .125], rtol=1e-12)


def test_exponential_lr():
    lrs = run(S.ExponentialLR(make_opt(lrs=(0.2,)), gamma=0.9), 50)[:, 0]
    np.testing.assert_allclose(lrs, 0.2 * 0.9 ** np.arange(50), rtol=1e-12)


def test_cosine_annealing_recursive_form_follows_closed_form_over_periods():
    t_max, eta_min = 10, 0.01
    lrs = run(S.CosineAnnealingLR(make_opt(lrs=(0.1,)), T_max=t_max, eta_min=eta_min), 45)
    e = np.arange(45)
    closed = eta_min + (0.1 - eta_min) * (1 + np.cos(np.pi * e / t_max)) / 2
    np.testing.assert_allclose(lrs[:, 0], closed, rtol=1e-9, atol=1e-12)


def test_linear_lr_warms_up_then_stays():
    lrs = run(S.LinearLR(make_opt(lrs=(0.05,)), start_factor=0.25, total_iters=4), 8)[:, 0]
    expected = [0.05 * (0.25 + 0.75 * min(e, 4) / 4) for e in range(8)]
    np.testing.assert_allclose(lrs, expected, rtol=1e-12)


def test_linear_lr_rejects_bad_factors():
    with pytest.raises(ValueError, match="Starting multiplicative factor"):
        S.LinearLR(make_opt(), start_factor=0)
    with pytest.raises(ValueError, match="Ending multiplicative factor"):
        S.LinearLR(make_opt(), end_factor=1.5)


def test_lambda_lr_per_group():
    opt = make_opt(lrs=(1.0, 2.0))
    lrs = run(S.LambdaLR(opt, [lambda e: 0.5 ** e, lambda e: e + 1]), 5)
    np.testing.assert_allclose(lrs[:, 0], 0.5 ** np.arange(5))
    np.testing.assert_allclose(lrs[:, 1], 2.0 * (np.arange(5) + 1))
    with pytest.raises(ValueError, match="Expected 2 lr_lambdas, but got 1"):
        S.LambdaLR(make_opt(lrs=(1.0, 2.0)), [lambda e: 1.0])


def test_chained_schedulers_multiply():
    opt = make_opt(lrs=(1.0,))
    a = S.ExponentialLR(opt, gamma=0.5)
    b = S.StepLR(opt, step_size=2, gamma=0.1)
    seen = []
    for _ in range(5):
        opt.step()
        a.step()
        b.step()
        seen.append(opt.param_groups[0]["lr"])
    expected = [0.5 ** e * 0.1 ** (e // 2) for e in range(1, 6)]
    np.testing.assert_allclose(seen, expected, rtol=1e-12)


@pytest.mark.parametrize("strategy", ["cos", "linear"])
@pytest.mark.parametrize("three_phase", [False, True])
def test_one_cycle_endpoints_and_momentum(strategy, three_phase):
    opt = make_opt(lrs=(0.1,), momentum=0.9)
    sched = S.OneCycleLR(opt, max_lr=1.0, total_steps=20, anneal_strategy=strategy,
                         three_phase=three_phase)
    lrs, moms = [], []
    for _ in range(20):
        lrs.append(opt.param_groups[0]["lr"])
        moms.append(opt.param_groups[0]["momentum"])
        opt.step()
        if len(lrs) < 20:
            sched.step()
    assert lrs[0] == pytest.approx(1.0 / 25) and moms[0] == pytest.approx(0.95)
    peak = int(np.argmax(lrs))
    assert lrs[peak] == pytest.approx(1.0) and moms[peak] == pytest.approx(0.85)
    assert peak == 5  # pct_start * total_steps - 1
    assert lrs[-1] == pytest.approx(1.0 / 25 / 1e4)
    with pytest.raises(ValueError, match="Tried to step 21 times. The specified number of "
                                         "total steps is 20"):
        sched.step()
        sched.step()


def test_one_cycle_cycles_adam_beta1_and_validates():
    opt = make_opt(optim.Adam, lrs=(0.1,), betas=(0.9, 0.99))
    S.OneCycleLR(opt, max_lr=0.5, epochs=2, steps_per_epoch=5)
    assert opt.param_groups[0]["betas"] == (0.95, 0.99)
    with pytest.raises(ValueError, match="You must define either total_steps OR"):
        S.OneCycleLR(make_opt(), max_lr=0.1)
    with pytest.raises(ValueError, match="Expected float between 0 and 1 pct_start"):
        S.OneCycleLR(make_opt(), max_lr=0.1, total_steps=5, pct_start=1)
    with pytest.raises(ValueError, match="anneal_strategy must be one of 'cos' or 'linear'"):
        S.OneCycleLR(make_opt(), max_lr=0.1, total_steps=5, anneal_strategy="exp")


def test_scheduler_records_initial_lr_and_last_lr():
    opt = make_opt(lrs=(0.3,))
    sched = S.StepLR(opt, step_size=1, gamma=0.5)
    assert opt.param_groups[0]["initial_lr"] == 0.3 and sched.base_lrs == [0.3]
    assert sched.last_epoch == 0 and sched.get_last_lr() == [0.3]
    opt.step()
    sched.step()
    assert sched.last_epoch == 1 and sched.get_last_lr() == [0.15]
    with pytest.raises(KeyError, match="initial_lr"):
        S.StepLR(make_opt(), step_size=1, last_epoch=3)


def test_warnings_for_wrong_call_order_and_get_lr_outside_step():
    opt = make_opt()
    sched = S.ExponentialLR(opt, gamma=0.5)
    with pytest.warns(UserWarning, match="before `optimizer.step\\(\\)`"):
        sched.step()
    with pytest.warns(UserWarning, match="please use `get_last_lr\\(\\)`"):
        sched.get_lr()
    opt2 = make_opt()
    sched2 = S.ExponentialLR(opt2, gamma=0.5)
    opt2.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sched2.step()


def test_step_with_epoch_uses_closed_form_and_warns():
    opt = make_opt(lrs=(1.0,))
    sched = S.StepLR(opt, step_size=2, gamma=0.1)
    opt.step()
    with pytest.warns(UserWarning, match="The epoch parameter"):
        sched.step(5)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.01)


def _resume_matches(make_sched, steps=30, cut=11, tmp_path=None):
    """Run ``steps`` epochs; separately run ``cut``, checkpoint the optimizer and scheduler
    (through gl.save/gl.load when tmp_path is given), restore into fresh ones, finish."""
    full = run(make_sched(make_opt(lrs=(0.1, 0.02), momentum=0.9)), steps)
    first = make_sched(make_opt(lrs=(0.1, 0.02), momentum=0.9))
    head = run(first, cut)
    ckpt = {"opt": first.optimizer.state_dict(), "sched": first.state_dict()}
    if tmp_path is not None:
        gl.save(ckpt, tmp_path / "sched.ckpt")
        ckpt = gl.load(tmp_path / "sched.ckpt")
    second = make_sched(make_opt(lrs=(0.5, 0.5), momentum=0.5))
    second.optimizer.load_state_dict(ckpt["opt"])
    second.load_state_dict(ckpt["sched"])
    tail = run(second, steps - cut)
    np.testing.assert_array_equal(np.concatenate([head, tail]), full)


SCHEDULERS = {
    "step": lambda o: S.StepLR(o, step_size=4, gamma=0.5),
    "multistep": lambda o: S.MultiStepLR(o, milestones=[3, 12, 12, 20]),
    "exponential": lambda o: S.ExponentialLR(o, gamma=0.95),
    "cosine": lambda o: S.CosineAnnealingLR(o, T_max=7, eta_min=0.001),
    "linear": lambda o: S.LinearLR(o, start_factor=0.1, total_iters=15),
    "lambda": lambda o: S.LambdaLR(o, lambda e: 1 / (1 + e)),
    "onecycle": lambda o: S.OneCycleLR(o, max_lr=[1.0, 0.1], total_steps=31, three_phase=True),
}


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_state_dict_round_trip_continues_identically(name, tmp_path):
    _resume_matches(SCHEDULERS[name])
    _resume_matches(SCHEDULERS[name], tmp_path=tmp_path)


def test_lambda_state_dict_excludes_functions_but_keeps_callable_objects():
    class Factor:
        def __init__(self):
            self.k = 0.5

        def __call__(self, epoch):
            return self.k ** epoch

    opt = make_opt(lrs=(1.0, 1.0))
    sd = S.LambdaLR(opt, [lambda e: 1.0, Factor()]).state_dict()
    assert sd["lr_lambdas"] == [None, {"k": 0.5}]
    assert "optimizer" not in sd
    fresh = Factor()
    fresh.k = 0.9
    sched = S.LambdaLR(make_opt(lrs=(1.0, 1.0)), [lambda e: 1.0, fresh])
    sched.load_state_dict(sd)
    assert fresh.k == 0.5 and sched.last_epoch == 0


def test_cosine_restart_branch_is_exact_at_period_end():
    """At epoch T_max + 1 the recursive ratio would divide by zero; the special branch moves
    the lr back up by one cosine step."""
    opt = make_opt(lrs=(1.0,))
    sched = S.CosineAnnealingLR(opt, T_max=4, eta_min=0.0)
    lrs = run(sched, 7)[:, 0]
    assert lrs[4] == pytest.approx(0.0, abs=1e-15)
    assert lrs[5] == pytest.approx((1 - math.cos(math.pi / 4)) / 2)
