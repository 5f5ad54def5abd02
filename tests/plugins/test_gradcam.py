"""The gradcam plugin: maps equal hand computations (Grad-CAM on a conv + GAP + linear model,
Grad-CAM++ and LayerCAM against a loop-by-loop numpy reference), targets, the image grid,
bilinear upsampling against PyTorch, the colormaps, isolation of the probes (identical losses,
untouched .grad, modes and other plugins' hooks), zero hooks between probes, layer errors
before training, the no-Conv2d notice, and the discrimination cadence."""

from __future__ import annotations

import io

import numpy as np
import pytest
from gradlog_plugins.gradcam import (
    COLORMAPS,
    GradCAM,
    colorize,
    image_grid,
    normalize_maps,
    pointing_hits,
    upsample_bilinear,
)
from plugin_test_helpers import Recorder, baseline_losses, same_model, show

import gradlog as gl
from gradlog.plugin import Plugin, PluginConfigError, PluginError, resolve_plugins
from gradlog.testing import MemoryWriter, PluginHarness, tiny_model
from gradlog.train import TrainOptions, train


def _np(t):
    return np.array(t.detach().numpy() if hasattr(t, "detach") else t, dtype=np.float64)


def _conv_by_hand(x, w, b):
    """3x3 convolution, padding 1, stride 1, written as explicit shifted sums."""
    n, _, h, wd = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, w.shape[0], h, wd))
    for o in range(w.shape[0]):
        for c in range(w.shape[1]):
            for i in range(3):
                for j in range(3):
                    out[:, o] += w[o, c, i, j] * xp[:, c, i:i + h, j:j + wd]
        out[:, o] += b[o]
    return out


def _probe_images(h):
    return _np(h.run_obj.probe_sets["probe"]["images"])


# -- the maps themselves ------------------------------------------------------------------------
def test_gradcam_is_relu_cam_over_positions_on_a_conv_gap_linear_model(lib):
    model = same_model(lib, lambda nn: nn.Sequential(
        nn.Conv2d(1, 3, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(3, 4)),
        seed=3)
    h = PluginHarness(GradCAM, model=model, every=1).run(steps=3)
    last = h.plugin.last
    assert last["step"] == 3  # the epoch-end probe, with the final weights
    p = {n: _np(v) for n, v in model.named_parameters()}
    acts = _conv_by_hand(_probe_images(h), p["0.weight"], p["0.bias"])
    logits = acts.mean(axis=(2, 3)) @ p["3.weight"].T + p["3.bias"]
    targets = logits.argmax(axis=1)
    np.testing.assert_array_equal(last["targets"], targets)
    # d logit_c / d A_k = W[c, k] / (h w) everywhere: Grad-CAM = ReLU(CAM) / (h w)
    cam = np.einsum("bk,bkij->bij", p["3.weight"][targets], acts) / acts[0, 0].size
    expected = np.maximum(cam, 0.0)
    assert expected.max() > 0
    np.testing.assert_allclose(last["cams"], expected, rtol=1e-4, atol=1e-7)
    # the layer is at input resolution: the picture's map is the map divided by its peak
    np.testing.assert_allclose(last["maps"], normalize_maps(expected), rtol=1e-4, atol=1e-6)
    assert h.handles_left() == 0


def _reference(method, acts, grads):
    """Grad-CAM, Grad-CAM++ and LayerCAM one image and one channel at a time (the papers'
    formulas; Grad-CAM++ with the closed-form alphas of Chattopadhyay et al., eq. 19)."""
    b, k = acts.shape[:2]
    out = np.zeros((b,) + acts.shape[2:])
    for i in range(b):
        for c in range(k):
            a, g = acts[i, c], grads[i, c]
            if method == "gradcam":
                out[i] += g.mean() * a
            elif method == "gradcam++":
                alpha = np.zeros_like(g)
                nz = g != 0
                alpha[nz] = g[nz] ** 2 / (2 * g[nz] ** 2 + a.sum() * g[nz] ** 3)
                out[i] += (alpha * np.maximum(g, 0)).sum() * a
            else:
                out[i] += np.maximum(g, 0) * a
    return np.maximum(out, 0)


@pytest.mark.parametrize("method", ["gradcam", "gradcam++", "layercam"])
def test_methods_match_a_numpy_reference_on_a_conv_linear_model(method, lib):
    # seed 1: maps positive on most pixels for every method
    model = same_model(lib, lambda nn: nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.Flatten(), nn.Linear(8 * 16 * 16, 4)), seed=1)
    h = PluginHarness(GradCAM, model=model, method=method, target="label").run(steps=2)
    last = h.plugin.last
    p = {n: _np(v) for n, v in model.named_parameters()}
    acts = _conv_by_hand(_probe_images(h), p["0.weight"], p["0.bias"])
    # the layer feeds a linear map: the gradient of logit c is that row of the weight
    grads = p["2.weight"][np.asarray(last["labels"])].reshape(acts.shape)
    expected = _reference(method, acts, grads)
    assert (expected > 0).mean() > 0.5
    np.testing.assert_allclose(last["cams"], expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("target", ["pred", "label", 2])
def test_targets_are_the_prediction_the_label_or_a_fixed_class(target, engine):
    h = PluginHarness(GradCAM, target=target, every=1, engine=engine).run(steps=2)
    last = h.plugin.last
    labels = _np(h.run_obj.probe_sets["probe"]["labels"]).astype(int)
    if target == "pred":
        h.model.eval()
        with h.engine.no_grad():
            expected = _np(h.model(h.run_obj.probe_sets["probe"]["images"])).argmax(axis=1)
        h.model.train()
    elif target == "label":
        expected = labels
    else:
        expected = np.full(len(labels), 2)
    np.testing.assert_array_equal(last["targets"], expected)
    assert last["labels"] == labels.tolist()
    text = h.texts("gradcam/targets").values[-1]
    assert f"targets ({target}): " + " ".join(map(str, expected)) in text


def test_maps_differ_between_target_classes(engine):
    maps = [PluginHarness(GradCAM, target=c, engine=engine).run(steps=2).plugin.last["cams"]
            for c in (0, 1)]
    assert not np.allclose(maps[0], maps[1])


def test_a_target_class_the_model_lacks_fails_before_training(engine):
    h = PluginHarness(GradCAM, target=9, engine=engine)
    with pytest.raises(PluginError, match="target class 9 is out of range for a model with 4"):
        h.run(steps=2)
    assert h.losses == []
    assert h.handles_left() == 0


def test_target_label_without_labels_is_an_error(engine):
    probe = PluginHarness(GradCAM, engine=engine).run_obj.probe_sets
    sets = {"probe": {"images": probe["probe"]["images"]}}
    with pytest.raises(PluginError, match="target='label' needs labels"):
        PluginHarness(GradCAM, target="label", probe_sets=sets, engine=engine).run(steps=1)


@pytest.mark.parametrize("options, match", [
    ({"target": -1}, "-1"), ({"target": "best"}, "'best'"), ({"method": "scorecam"}, "scorecam"),
    ({"every": 0}, "'every'"), ({"alpha": 1.5}, "1.5"), ({"num_images": 0}, "'num_images'"),
    ({"colormap": "jet"}, "'jet'"), ({"discrimination": "always"}, "'always'"),
])
def test_invalid_options_are_rejected_when_the_plugin_is_created(options, match):
    with pytest.raises(PluginConfigError, match=match):
        GradCAM(**options)


def test_options_from_the_command_line_grammar():
    (plugin,) = resolve_plugins(["gradcam:target=2,method=gradcam++,layer=3,alpha=0.3"])
    assert (plugin.options.target, plugin.options.method) == (2, "gradcam++")
    assert (plugin.options.layer, plugin.options.alpha) == ("3", 0.3)
    (plugin,) = resolve_plugins(["gradcam:target=label"])
    assert plugin.options.target == "label"


def test_plugins_show_describes_every_option():
    text = show("gradcam")
    for word in ("layer", "method", "gradcam++", "layercam", "target", "every", "num_images",
                 "colormap", "alpha", "discrimination", "eval_mode", "observer"):
        assert word in text


# -- pictures -----------------------------------------------------------------------------------
def test_upsampling_matches_pytorch_bilinear_without_align_corners():
    torch = pytest.importorskip("torch")
    maps = np.random.default_rng(0).random((3, 5, 7))
    for size in ((32, 32), (17, 9), (5, 7)):
        ours = upsample_bilinear(maps, size)
        ref = torch.nn.functional.interpolate(torch.from_numpy(maps)[:, None], size=size,
                                              mode="bilinear", align_corners=False)[:, 0]
        np.testing.assert_allclose(ours, ref.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", sorted(COLORMAPS))
def test_colormaps_rise_monotonically_in_lightness(name):
    rgb = colorize(np.linspace(0, 1, 256)[None, None, :], name)[0, :, 0]  # (3, 256)
    lightness = 0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]
    assert np.all(np.diff(lightness) > 0)
    np.testing.assert_allclose(rgb[:, 0], COLORMAPS[name][0])
    np.testing.assert_allclose(rgb[:, -1], COLORMAPS[name][-1])


def test_image_grid_rows_are_input_heat_map_and_overlay(engine):
    h = PluginHarness(GradCAM, every=2, alpha=0.25, colormap="inferno",
                      engine=engine).run(steps=5)
    series = h.images("gradcam/3")
    assert series.steps == [0, 2, 4, 5]  # start, every 2 steps, epoch end
    grid = series.values[-1]
    assert grid.shape == (3, 3 * 18 + 2, 4 * 18 + 2) and grid.dtype == np.float32
    assert grid.min() >= 0 and grid.max() <= 1
    x = _probe_images(h)
    maps = h.plugin.last["maps"]
    assert maps.shape == (4, 16, 16) and maps.max() == pytest.approx(1.0)
    for i in range(4):
        cells = [grid[:, 2 + r * 18:2 + r * 18 + 16, 2 + i * 18:2 + i * 18 + 16] for r in range(3)]
        shown = (x[i] - x[i].min()) / (x[i].max() - x[i].min())
        np.testing.assert_allclose(cells[0], np.repeat(shown, 3, axis=0), atol=1e-6)
        heat = colorize(maps[i:i + 1], "inferno")[0]
        np.testing.assert_allclose(cells[1], heat, atol=1e-6)
        np.testing.assert_allclose(cells[2], 0.75 * cells[0] + 0.25 * cells[1], atol=1e-6)
    assert np.all(grid[:, :2] == 0.5) and np.all(grid[:, :, :2] == 0.5)  # the padding
    raw = h.scalars("gradcam/raw_max")
    assert raw.steps == [0, 2, 4, 5] and raw.values[-1] == pytest.approx(
        h.plugin.last["cams"].reshape(4, -1).max(axis=1).mean())


def test_image_grid_of_three_channel_inputs_keeps_colours():
    images = np.zeros((1, 3, 2, 2))
    images[0, 0] = 1.0  # pure red
    grid = image_grid(images, np.zeros((1, 2, 2)), pad=0)
    np.testing.assert_allclose(grid[:, :2, :2], images[0])


def test_pointing_hits_counts_peaks_inside_each_mask():
    maps = np.zeros((3, 4, 4))
    maps[0, 1, 1] = maps[1, 2, 3] = 1.0  # image 2: all zero, peak at (0, 0) -> no hit
    own = np.zeros((3, 4, 4), bool)
    other = np.zeros((3, 4, 4), bool)
    own[0, 1, 1] = other[1, 2, 3] = True
    own[1, 1, 1] = True
    assert pointing_hits(maps, own, other) == (1, 1)


# -- isolation ----------------------------------------------------------------------------------
def test_training_losses_are_bit_identical_with_and_without_gradcam(engine):
    h = PluginHarness(GradCAM, every=1, discrimination="every",
                      engine=engine).run(steps=4, epochs=2)
    assert len(h.scalars("gradcam/discrimination")) == 9
    assert h.losses == baseline_losses(4, 2, engine=engine)


class _Snapshot(Plugin):
    """Copies every .grad (and the grad objects) and the modules' modes at on_batch_end, and
    counts the training forwards its own forward hook sees (order 99: before gradcam)."""

    name = "test-snapshot-before"
    kind = "observer"
    order = 99

    def __init__(self):
        super().__init__()
        self.grads, self.modes, self.forwards, self.handles = {}, {}, 0, {}

    def setup(self, run):
        run.hooks.register_forward_hook("3", self._seen)

    def _seen(self, module, args, output):
        self.forwards += 1

    def on_batch_end(self, run):
        self.grads[run.step] = [(p.grad, _np(p.grad)) for p in run.model.parameters()]
        self.modes[run.step] = [m.training for m in run.model.modules()]
        self.handles[run.step] = run.handles_left()


class _SnapshotAfter(_Snapshot):
    name = "test-snapshot-after"
    order = 101


def test_probes_leave_grads_modes_and_other_plugins_hooks_alone(engine):
    before, after = _Snapshot(), _SnapshotAfter()
    h = PluginHarness(GradCAM, every=1, discrimination="every", plugins=[before, after],
                      engine=engine)
    h.run(steps=3)
    assert before.forwards == after.forwards == 3  # the probes' forwards are not seen
    for step in range(3):
        for (g0, a0), (g1, a1) in zip(before.grads[step], after.grads[step]):
            assert g1 is g0
            np.testing.assert_array_equal(a1, a0)
        assert all(after.modes[step]) and all(before.modes[step])
    assert len(h.images("gradcam/3")) == 4
    # gradcam holds no handle between probes: the run's count stays what the others hold
    assert set(after.handles.values()) == set(before.handles.values()) and \
        len(set(after.handles.values())) == 1
    assert h.handles_left() == 0


def test_no_hooks_between_probes_and_none_after_the_run(engine):
    rec = Recorder(count_hooks=True)
    h = PluginHarness(GradCAM, every=2, plugins=[rec], engine=engine).run(steps=5, epochs=2)
    assert h.images("gradcam/3").steps == [0, 2, 4, 5, 6, 8, 10]
    assert set(rec.hooks_at_start.values()) == {0}
    assert set(rec.hooks_at_end.values()) == {0}
    assert h.handles_left() == 0


def test_probes_run_in_eval_mode_so_batch_neighbours_do_not_change_a_map(lib):
    def model():
        return same_model(lib, lambda nn: nn.Sequential(
            nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 4)), seed=1)
    one = PluginHarness(GradCAM, model=model(), num_images=1).run(steps=3)
    four = PluginHarness(GradCAM, model=model(), num_images=4).run(steps=3)
    assert one.losses == four.losses
    np.testing.assert_allclose(one.plugin.last["cams"][0], four.plugin.last["cams"][0],
                               rtol=1e-5, atol=1e-7)
    assert all(m.training for m in four.model.modules())
    train_mode = PluginHarness(GradCAM, model=model(), num_images=4, eval_mode=False)
    assert not np.allclose(train_mode.run(steps=3).plugin.last["cams"][0],
                           one.plugin.last["cams"][0], rtol=1e-5, atol=1e-7)


# -- layers -------------------------------------------------------------------------------------
def test_default_layer_is_the_last_conv2d_and_a_named_layer_is_used(engine):
    assert PluginHarness(GradCAM, engine=engine).run(steps=1).tags("image") == ["gradcam/3"]
    h = PluginHarness(GradCAM, layer="0", engine=engine).run(steps=1)
    assert h.tags("image") == ["gradcam/0"]
    assert h.plugin.last["cams"].shape == (4, 16, 16)


def test_an_unknown_layer_lists_the_module_names_before_training(engine):
    h = PluginHarness(GradCAM, layer="features.9", engine=engine)
    with pytest.raises(PluginConfigError, match=r"no module 'features\.9'; its modules are: "
                                                r"0, 1, 2, 3, 4, 5, 6, 7"):
        h.run(steps=2)
    assert h.losses == [] and h.handles_left() == 0


def test_gradlog_train_exits_2_on_an_unknown_layer(tmp_path):
    config = tmp_path / "small.toml"
    config.write_text("[train]\ntrain_size = 64\nval_size = 32\ntwo_object_size = 4\n")
    out, err = io.StringIO(), io.StringIO()
    code = train(TrainOptions(logdir=str(tmp_path / "run"), default_plugins=False, quiet=True,
                              plugins=("gradcam:layer=nope",), config_file=str(config)),
                 out, err)
    assert code == 2
    assert "no module 'nope'; its modules are: conv1, bn1, relu1" in err.getvalue()


def test_a_layer_without_spatial_output_is_said_once_and_not_probed_again(engine):
    with pytest.warns(RuntimeWarning) as caught:
        h = PluginHarness(GradCAM, layer="7", every=1, engine=engine).run(steps=3, epochs=2)
    said = [str(w.message) for w in caught if "gradcam" in str(w.message)]
    assert said == ["gradcam: layer '7' returned a tensor of shape (4, 4); Grad-CAM needs one "
                    "(N, C, H, W) tensor; no maps are logged"]
    assert h.texts("gradcam/notice").values == said
    assert h.tags() == ["gradcam/notice"]


def test_a_model_without_conv2d_gets_one_notice_and_no_work(lib):
    def mlp():
        return same_model(lib, lambda nn: nn.Sequential(
            nn.Flatten(), nn.Linear(256, 16), nn.ReLU(), nn.Linear(16, 4)))
    h = PluginHarness(GradCAM, model=mlp(), every=1).run(steps=3, epochs=2)
    assert h.tags() == ["gradcam/notice"]
    (text,) = h.texts("gradcam/notice").values
    assert "no Conv2d" in text
    assert h.losses == PluginHarness(Recorder, model=mlp()).run(steps=3, epochs=2).losses


# -- discrimination -----------------------------------------------------------------------------
@pytest.mark.parametrize("when, steps", [("epoch", [4, 8]), ("every", [0, 2, 4, 6, 8]),
                                         ("off", [])])
def test_discrimination_cadence(when, steps, engine):
    h = PluginHarness(GradCAM, every=2, discrimination=when, engine=engine).run(steps=4,
                                                                               epochs=2)
    disc, own, other = (h.scalars(f"gradcam/{t}")
                        for t in ("discrimination", "own_hit", "other_hit"))
    assert disc.steps == own.steps == other.steps == steps
    for d, o, t in zip(disc.values, own.values, other.values):
        assert 0 <= o <= 1 and 0 <= t <= 1 and d == pytest.approx(o - t)
    assert h.images("gradcam/3").steps == [0, 2, 4, 6, 8]


def _label_maps(model, images, labels):
    """The maps ``gl.watch`` + gradcam draws at the start of a run for the given labels."""
    plugin = GradCAM(target="label", num_images=64, discrimination="off")
    sets = {"probe": {"images": images, "labels": labels}}
    with gl.watch(model, plugins=[plugin], probe_sets=sets, writer=MemoryWriter(), strict=True):
        pass
    return plugin.last["maps"]


@pytest.mark.filterwarnings("ignore:gl.watch without an optimizer")
def test_discrimination_counts_the_pairs_whose_map_peaks_in_each_object(engine):
    h = PluginHarness(GradCAM, engine=engine).run(steps=2)
    two = h.run_obj.probe_sets["two_object"]
    masks = np.asarray(two["masks"]).reshape(len(two["masks"]), 2, -1)
    rows = np.arange(len(masks))
    own = other = 0
    for j in (0, 1):
        maps = _label_maps(h.model, two["images"], two["labels"][:, j])
        peaks = maps.reshape(len(maps), -1).argmax(axis=1)
        own += int(masks[rows, j, peaks].sum())
        other += int(masks[rows, 1 - j, peaks].sum())
    assert h.scalars("gradcam/own_hit").values == [own / (2 * len(masks))]
    assert h.scalars("gradcam/other_hit").values == [other / (2 * len(masks))]


def test_without_a_two_object_set_discrimination_is_skipped_with_a_notice(engine):
    probe = PluginHarness(GradCAM, engine=engine).run_obj.probe_sets
    h = PluginHarness(GradCAM, probe_sets={"probe": probe["probe"]},
                      engine=engine).run(steps=2, epochs=2)
    assert "gradcam/discrimination" not in h.tags()
    (text,) = h.texts("gradcam/notice").values
    assert "two_object" in text
    assert len(h.images("gradcam/3")) == 3


def test_tiny_model_fixture_is_what_the_tags_assume(engine):
    assert [n for n, _ in tiny_model(engine).named_modules()][1:] == [str(i) for i in range(8)]
