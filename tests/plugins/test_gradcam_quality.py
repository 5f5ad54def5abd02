"""Acceptance test for Grad-CAM on the default example (slow: trains it for real).

``gradlog train`` with only the gradcam plugin trains the built-in ``shapes`` CNN for the
default 3 epochs; then, on the 200 two-object probe images, the map for each object's class
must peak inside that object (own hit >= 0.9) and not inside the other one (own - other >=
0.8). The same model with re-randomized weights must fail (< 0.5), which shows the score
measures what the network learned and not where the bright objects are; so must the trained
features with a re-randomized classifier, whose class maps then point at arbitrary objects.
"""

from __future__ import annotations

import io

import pytest
from gradlog_plugins.gradcam import GradCAM
from plugin_test_helpers import read_events

import gradlog as gl
from gradlog.examples.shapes import build, cnn
from gradlog.testing import MemoryWriter
from gradlog.train import TrainOptions, runs, train

pytestmark = pytest.mark.slow


def _scalars(events, tag):
    return [v.simple_value for e in events for v in e.summary.value if v.tag == tag]


def _discrimination(model, probe_sets):
    """own hit, other hit of ``model`` on the two-object probe set, through ``gl.watch``."""
    writer = MemoryWriter()
    with gl.watch(model, plugins=[GradCAM()], probe_sets=probe_sets, writer=writer,
                  strict=True) as run:
        run.epoch_end()
    own = writer.series("scalar", "gradcam/own_hit").values
    other = writer.series("scalar", "gradcam/other_hit").values
    return own[-1], other[-1]


def _rerandomized(state, names, seed):
    """The trained model with the parameters whose name starts with one of ``names`` drawn
    again from their initializers (BatchNorm running statistics stay trained)."""
    model = cnn(4)
    model.load_state_dict(state)
    gl.manual_seed(seed)
    fresh = dict(cnn(4).named_parameters())
    with gl.no_grad():
        for name, p in model.named_parameters():
            if name.startswith(names):
                p.copy_(fresh[name])
    return model


@pytest.mark.filterwarnings("ignore:gl.watch without an optimizer")
def test_trained_default_example_discriminates_and_rerandomized_copies_do_not(tmp_path):
    logdir = tmp_path / "run"
    out, err = io.StringIO(), io.StringIO()
    code = train(TrainOptions(logdir=str(logdir), default_plugins=False, plugins=("gradcam",),
                              quiet=True), out, err)
    assert code == 0, err.getvalue()
    events = read_events(logdir)
    assert _scalars(events, "val/acc")[-1] >= 0.95
    own, other = _scalars(events, "gradcam/own_hit"), _scalars(events, "gradcam/other_hit")
    disc = _scalars(events, "gradcam/discrimination")
    assert len(own) == len(disc) == 3  # one score per epoch
    assert own[-1] >= 0.9, own
    assert disc[-1] >= 0.8, disc

    state = runs.load_checkpoint(runs.newest_checkpoint(str(logdir)))["model"]
    probe_sets = build({"seed": 0})["probe_sets"]
    assert len(probe_sets["two_object"]["labels"]) == 200
    trained = cnn(4)
    trained.load_state_dict(state)
    # the scores are a property of the model: recomputed from the checkpoint, the same
    assert _discrimination(trained, probe_sets) == pytest.approx((own[-1], other[-1]))

    every = tuple(name for name, _ in trained.named_parameters())
    for names in (every, ("fc.",)):
        hits = [_discrimination(_rerandomized(state, names, seed), probe_sets)
                for seed in (1, 2)]
        for own_hit, other_hit in hits:
            assert own_hit - other_hit < 0.5, (names, hits)
