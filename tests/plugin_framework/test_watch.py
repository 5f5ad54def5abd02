"""gl.watch inside a user's own loop: which events fire when, the step numbering, batch
replacement, internal passes, and that leaving the block leaves nothing behind."""

from __future__ import annotations

import numpy as np
import pytest
from plugin_helpers import cross_entropy, make_batches, setup_model, user_loop

import gradlog as gl
from gradlog.plugin import Plugin, PluginConfigError
from gradlog.testing import MemoryWriter
from gradlog.utils.hooks import count_hooks


class Recorder(Plugin):
    """Records every event with the step it saw."""

    name = "recorder"

    def __init__(self) -> None:
        super().__init__()
        self.events: list = []

    def _rec(self, event, run):
        self.events.append((event, run.step))

    def on_train_start(self, run): self._rec("train_start", run)
    def on_batch_start(self, run, batch): self._rec("batch_start", run)
    def on_after_backward(self, run): self._rec("after_backward", run)
    def on_before_optimizer_step(self, run): self._rec("before_step", run)
    def on_after_optimizer_step(self, run): self._rec("after_step", run)

    def on_batch_end(self, run, metrics):
        self.events.append(("batch_end", run.step, sorted(metrics)))

    def on_validation_end(self, run, metrics): self._rec("validation_end", run)
    def on_epoch_end(self, run): self._rec("epoch_end", run)
    def on_train_end(self, run): self._rec("train_end", run)


@pytest.mark.parametrize("announce", [True, False])
def test_events_fire_in_order_with_batch_k_at_step_k(announce):
    model, opt = setup_model()
    rec = Recorder()
    with gl.watch(model, opt, plugins=[rec], writer=MemoryWriter()) as run:
        user_loop(run, model, opt, make_batches(2), announce=announce)
        run.validation_end({"val/acc": 0.5})
        run.epoch_end()
    per_batch = ["batch_start", "after_backward", "before_step", "after_step", "batch_end"]
    expected = [("train_start", 0)]
    for k in range(2):
        expected += [(e, k) if e != "batch_end" else (e, k, ["train/loss"]) for e in per_batch]
    expected += [("validation_end", 2), ("epoch_end", 2), ("train_end", 2)]
    assert rec.events == expected


def test_log_scalar_logs_batch_k_at_step_k():
    model, opt = setup_model()
    writer = MemoryWriter()
    with gl.watch(model, opt, writer=writer) as run:
        losses = user_loop(run, model, opt, make_batches(3))
    s = writer.series("scalar", "train/loss")
    assert s.steps == [0, 1, 2] and np.allclose(s.values, losses)


def test_a_mutator_can_replace_the_batch():
    class Doubler(Plugin):
        name = "doubler"
        kind = "mutator"

        def on_batch_start(self, run, batch):
            x, y = batch
            return x * 0, y

    model, opt = setup_model()
    seen = []
    model.register_forward_pre_hook(lambda m, args: seen.append(float(args[0].abs().sum())))
    with gl.watch(model, opt, plugins=[Doubler()], writer=MemoryWriter()) as run:
        user_loop(run, model, opt, make_batches(2))
    assert seen == [0.0, 0.0]


def test_observers_do_not_change_the_trajectory():
    class Busy(Plugin):
        """An observer with hooks everywhere and its own forward/backward probe."""

        name = "busy"

        def setup(self, run):
            run.hooks.register_forward_hook("fc1", lambda m, a, o: None)
            run.hooks.register_full_backward_hook("fc2", lambda m, gi, go: None)
            run.hooks.register_hook(run.model.fc1.weight, lambda g: None)

        def on_batch_end(self, run, metrics):
            with run.internal_pass("probe"):
                run.model.eval()
                x = gl.randn(5, 8)  # draws from the plugin's own generator
                run.model.train()
                loss = run.model(x).sum()
                loss.backward()

    def train(plugins):
        model, opt = setup_model(seed=3)
        with gl.watch(model, opt, plugins=plugins, writer=MemoryWriter()) as run:
            losses = user_loop(run, model, opt, make_batches(5))
            after = gl.randn(3).numpy()
        return losses, [p.detach().numpy().copy() for p in model.parameters()], \
            model.running.numpy().copy(), after

    plain, with_busy = train([]), train([Busy()])
    assert plain[0] == with_busy[0]  # bit-identical losses
    for a, b in zip(plain[1], with_busy[1]):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(plain[2], with_busy[2])  # buffers restored
    np.testing.assert_array_equal(plain[3], with_busy[3])  # global random stream untouched


def test_internal_pass_hides_from_other_plugins_and_restores_state():
    calls = []

    class Watcher(Plugin):
        name = "watcher"

        def setup(self, run):
            run.hooks.register_forward_hook("fc1", lambda m, a, o: calls.append(run.phase))

    class Prober(Plugin):
        name = "prober"

        def on_batch_end(self, run, metrics):
            grads = [p.grad for p in run.model.parameters()]
            with run.internal_pass("probe"):
                assert run.phase == "probe"
                assert all(p.grad is None for p in run.model.parameters())
                run.model.eval()
                run.model(gl.randn(2, 8)).sum().backward()
            assert run.phase == "train" and run.model.training
            assert [p.grad for p in run.model.parameters()] == grads

    model, opt = setup_model()
    with gl.watch(model, opt, plugins=[Watcher(), Prober()], writer=MemoryWriter()) as run:
        user_loop(run, model, opt, make_batches(2))
    assert calls == ["train", "train"]  # the probes' forwards were not seen


@pytest.mark.filterwarnings("ignore:Full backward hook is firing")  # fc1's input needs no grad
def test_leaving_watch_removes_every_hook_and_closes_its_writer(tmp_path):
    class Hooky(Plugin):
        name = "hooky"

        def setup(self, run):
            for name, _ in run.model.named_modules():
                run.hooks.register_forward_hook(name, lambda m, a, o: None)
                run.hooks.register_full_backward_hook(name, lambda m, gi, go: None)
            for p in run.model.parameters():
                run.hooks.register_hook(p, lambda g: None)
                run.hooks.register_post_accumulate_grad_hook(p, lambda t: None)
            run.hooks.register_step_post_hook(lambda o, a, k: None)

    model, opt = setup_model()
    with gl.watch(model, opt, plugins=[Hooky()], logdir=str(tmp_path)) as run:
        assert count_hooks(model, opt) > 10
        user_loop(run, model, opt, make_batches(2))
    assert count_hooks(model, opt) == 0 and run.handles_left() == 0
    assert any("tfevents" in p.name for p in tmp_path.iterdir())


def test_unknown_layer_name_is_a_config_error_listing_the_modules():
    class Wrong(Plugin):
        name = "wrong"

        def setup(self, run):
            run.hooks.register_forward_hook("fc9", lambda m, a, o: None)

    model, opt = setup_model()
    with pytest.raises(PluginConfigError, match="no module 'fc9'; its modules are: fc1, fc2"):
        gl.watch(model, opt, plugins=[Wrong()], writer=MemoryWriter())
    assert count_hooks(model, opt) == 0


def test_run_hooks_outside_plugins_is_an_error():
    model, opt = setup_model()
    with gl.watch(model, opt, writer=MemoryWriter()) as run, \
            pytest.raises(RuntimeError, match="available to plugins"):
        run.hooks  # noqa: B018


def test_run_state_round_trips_plugin_state_and_generators():
    class Counter(Plugin):
        name = "counter"

        def __init__(self) -> None:
            super().__init__()
            self.n = 0

        def on_batch_end(self, run, metrics):
            self.n += 1
            self.draw = float(gl.rand(1, generator=run.rng).item())

        def state_dict(self):
            return {"n": self.n}

        def load_state_dict(self, state):
            self.n = state["n"]

    model, opt = setup_model()
    c = Counter()
    with gl.watch(model, opt, plugins=[c], writer=MemoryWriter()) as run:
        user_loop(run, model, opt, make_batches(2))
        state = run.state_dict()
        user_loop(run, model, opt, make_batches(1))
    next_draw = c.draw  # the last batch ends when the block is left
    c2 = Counter()
    model2, opt2 = setup_model()
    with gl.watch(model2, opt2, plugins=[c2], writer=MemoryWriter()) as run2:
        run2.load_state_dict(state)
        assert (run2.step, c2.n) == (2, 2)
        user_loop(run2, model2, opt2, make_batches(1))
    assert c2.draw == next_draw


def test_cross_entropy_helper_is_sane():
    out = gl.tensor([[0.0, 0.0, 0.0]])
    assert abs(float(cross_entropy(out, gl.tensor([1])).item()) - np.log(3)) < 1e-6


def test_draws_on_run_rng_inside_an_internal_pass_advance_the_plugin_stream():
    class Draws(Plugin):
        name = "draws"

        def __init__(self) -> None:
            super().__init__()
            self.seen: list = []

        def on_batch_end(self, run, metrics):
            with run.internal_pass("probe"):
                direct = float(gl.rand(1, generator=run.rng).item())
                via_global = float(gl.rand(1).item())
            self.seen.append((direct, via_global))

    model, opt = setup_model()
    d = Draws()
    with gl.watch(model, opt, plugins=[d], writer=MemoryWriter()) as run:
        user_loop(run, model, opt, make_batches(3))
        after = gl.rand(2).numpy()
    flat = [v for pair in d.seen for v in pair]
    assert len(set(flat)) == len(flat)  # one stream, never repeated
    model2, opt2 = setup_model()
    with gl.watch(model2, opt2, writer=MemoryWriter()) as run2:
        user_loop(run2, model2, opt2, make_batches(3))
        np.testing.assert_array_equal(gl.rand(2).numpy(), after)  # global stream untouched


def test_log_histograms_reaches_another_writer_as_one_call_per_tag():
    model, opt = setup_model()
    writer = MemoryWriter()
    with gl.watch(model, opt, writer=writer) as run:
        run.log_histograms({"h/a": gl.tensor([1.0, 2.0]), "h/b": np.array([3.0])}, step=4,
                           also_tags={"h/a": ("h/a2",)})
        run.log_histograms({}, step=5)
    logged = [(tag, step, list(v)) for kind, tag, step, v in writer.records
              if kind == "histogram"]
    assert logged == [("h/a", 4, [1.0, 2.0]), ("h/a2", 4, [1.0, 2.0]), ("h/b", 4, [3.0])]


def test_log_scalars_from_reaches_another_writer_computed_at_once():
    model, opt = setup_model()
    writer = MemoryWriter()
    with gl.watch(model, opt, writer=writer) as run:
        run.log_scalars_from(["s/sum", "s/none"], lambda v: (float(v.sum()), None),
                             (gl.tensor([1.0, 2.0]),), step=3)
    assert [(tag, step, v) for kind, tag, step, v in writer.records if kind == "scalar"] == [
        ("s/sum", 3, 3.0)]


def test_watch_logs_the_model_text_with_its_parameters_when_it_starts():
    model, opt = setup_model()
    writer = MemoryWriter()
    with gl.watch(model, opt, writer=writer):
        pass
    (text,) = [(tag, step, v) for kind, tag, step, v in writer.records if kind == "text"]
    assert text[:2] == ("model", 0)
    assert text[2].startswith("```\n" + repr(model) + "\n```\n")
    assert "| `fc1.weight` | (16, 8) | 128 | yes |" in text[2]
    assert text[2].endswith("195 parameters, 195 trainable")


def test_log_scalars_from_with_the_wrong_count_names_it_on_another_writer():
    model, opt = setup_model()
    with gl.watch(model, opt, writer=MemoryWriter()) as run:
        with pytest.raises(ValueError, match="log_scalars_from: the function returned 1 "
                                             "values for 2 tags"):
            run.log_scalars_from(["s/a", "s/b"], lambda v: (1.0,), (gl.tensor([1.0]),))


def test_a_closure_step_on_gradlogs_optimizer_logs_the_closures_gradient():
    from gradlog_plugins.grad_norm import GradNorm
    model, opt = setup_model()
    writer, computed = MemoryWriter(), {}
    with gl.watch(model, opt, writer=writer, plugins=[GradNorm(every=1, per_layer=False)],
                  strict=True) as run:
        for x, y in make_batches(3):
            def closure(x=x, y=y):
                opt.zero_grad()
                loss = cross_entropy(model(x), y)
                loss.backward()
                computed[run.step] = float(np.sqrt(sum(
                    np.square(p.grad.numpy().astype(np.float64)).sum()
                    for p in model.parameters())))
                return loss
            opt.step(closure)
    logged = writer.series("scalar", "grad-norm/global")
    assert logged.steps == [0, 1, 2]  # step 0 too, each its own step's gradient
    np.testing.assert_allclose(logged.values, [computed[s] for s in logged.steps], rtol=1e-6)


class _Opaque:
    pass


class _Stateful(Plugin):
    """Its state: a tensor of the model's engine, and (optionally) an object no checkpoint
    holds."""

    name = "stateful"

    def __init__(self, make_tensor, opaque: bool) -> None:
        super().__init__()
        self.make_tensor, self.opaque = make_tensor, opaque

    def state_dict(self):
        state = {"seen": self.make_tensor()}
        return {**state, "cache": _Opaque()} if self.opaque else state


@pytest.mark.parametrize("engine", ["gradlog", "torch"])
def test_state_dict_leaves_out_an_observers_state_a_checkpoint_cannot_hold(tmp_path, engine):
    if engine == "torch":
        torch = pytest.importorskip("torch")
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        make = lambda: torch.ones(3)  # noqa: E731
    else:
        model, opt = setup_model()
        make = lambda: gl.ones(3)  # noqa: E731
    plugins = [_Stateful(make, opaque=True), Recorder()]
    good = _Stateful(make, opaque=False)
    good.name = "stateful-ok"
    with gl.watch(model, opt, logdir=str(tmp_path), plugins=[*plugins, good],
                  graph=False) as run:
        with pytest.warns(RuntimeWarning) as caught:
            state = run.state_dict()
    (warning,) = [w for w in caught if "plugin 'stateful'" in str(w.message)]
    assert str(warning.message).startswith(
        "plugin 'stateful' (observer) failed in state_dict at step 0: TypeError: "
        'state_dict()["cache"]: unsupported type _Opaque (a checkpoint cannot hold it)')
    assert set(state["plugins"]) == {"recorder", "stateful-ok"}
    assert set(state["generators"]) == {"recorder", "stateful", "stateful-ok"}
    saved = tmp_path / "state.npz"
    gl.save(run.engine.to_checkpoint(state), saved)
    np.testing.assert_array_equal(gl.load(saved)["plugins"]["stateful-ok"]["seen"].numpy(),
                                  np.ones(3))
