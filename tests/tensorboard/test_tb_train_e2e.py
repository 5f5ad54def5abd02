"""End to end: ``gradlog train`` with every built-in plugin enabled, then real TensorBoard
servers (both loaders) show everything the run logged, through the HTTP endpoints the
dashboards use: scalars with exact steps, histograms, distributions, Grad-CAM images, text and
hparams."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image
from tb_helpers import TensorBoardServer, train_tiny

pytestmark = [pytest.mark.server, pytest.mark.slow]

PLUGINS = (
    "nan-guard", "grad-clip:max_norm=0.5", "grad-noise:eta=0.001",
    "adversarial:mode=fgsm,eval_size=16,log_every=1",
    "histogram:every=2", "grad-norm:every=1", "gradcam:every=4,num_images=4",
    "lr-monitor", "activation-stats:every=4",
)
STEPS = 8  # 256 images, batch 64, 2 epochs


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return train_tiny(tmp_path_factory.mktemp("e2e"), "all-plugins", 256, epochs=2,
                      plugins=PLUGINS, strict_plugins=True)


@pytest.fixture(scope="module", params=["false", "true"])
def server(request, run_dir):
    server = TensorBoardServer(str(run_dir), request.param)
    try:
        server.wait_ready()
        server.wait_for(lambda: len(server.get("/data/plugin/scalars/scalars",
                                               run="all-plugins", tag="train/loss")) == STEPS)
        yield server
    finally:
        server.stop()


def _tags(server, plugin: str) -> set:
    return set(server.get(f"/data/plugin/{plugin}/tags").get("all-plugins", {}))


def test_every_scalar_of_the_run_and_its_plugins_is_shown(server):
    tags = _tags(server, "scalars")
    expected = {"train/loss", "train/acc", "train/lr", "train/steps_per_sec", "val/loss",
                "val/acc", "grad-norm/global", "grad-clip/norm_before", "grad-clip/norm_after",
                "grad-clip/clip_fraction", "grad-noise/std", "adversarial/loss_clean",
                "adversarial/loss_adv", "adversarial/robust_acc", "lr-monitor/lr",
                "gradcam/discrimination", "gradcam/own_hit"}
    expected |= {f"plugins/{p.split(':')[0]}/ms_per_step" for p in PLUGINS}
    assert expected <= tags, sorted(expected - tags)
    assert any(t.startswith("activation-stats/") for t in tags)
    assert any(t.startswith("histogram/update_ratio/") for t in tags)
    loss = server.get("/data/plugin/scalars/scalars", run="all-plugins", tag="train/loss")
    assert [p[1] for p in loss] == list(range(STEPS)) and all(np.isfinite(p[2]) for p in loss)
    val = server.get("/data/plugin/scalars/scalars", run="all-plugins", tag="val/acc")
    assert [p[1] for p in val] == [4, 8] and all(0 <= p[2] <= 1 for p in val)


def test_histograms_and_distributions_of_weights_gradients_and_activations(server):
    tags = _tags(server, "histograms")
    for kind in ("weight", "grad_raw", "grad", "activation"):
        assert any(t.startswith(f"histogram/{kind}/") for t in tags), kind
    tag = sorted(t for t in tags if t.startswith("histogram/grad_raw/"))[0]
    series = server.get("/data/plugin/histograms/histograms", run="all-plugins", tag=tag)
    assert [s[1] for s in series] == [0, 2, 4, 6]
    for _, _, buckets in series:
        assert all(left <= right for left, right, _ in buckets)
    dist = server.get("/data/plugin/distributions/distributions", run="all-plugins", tag=tag)
    assert len(dist) == 4 and all(len(d[2]) == 9 for d in dist)


def test_gradcam_images_decode(server):
    tags = [t for t in _tags(server, "images") if t.startswith("gradcam/")]
    assert tags
    entries = server.get("/data/plugin/images/images", run="all-plugins", tag=tags[0], sample=0)
    assert entries
    body, content_type = server.get("/data/plugin/images/individualImage?"
                                    + entries[-1]["query"])
    assert content_type == "image/png"
    image = np.asarray(Image.open(io.BytesIO(body)))
    assert image.ndim == 3 and image.shape[2] in (3, 4) and image.std() > 0


def test_text_and_hparams(server):
    tags = _tags(server, "text")
    assert {"config", "model"} <= {t.split("/text_summary")[0] for t in tags}
    (entry,) = server.get("/data/plugin/text/text", run="all-plugins",
                          tag=next(t for t in tags if t.startswith("config")))
    assert "<table>" in entry["text"] and "grad-clip.max_norm" in entry["text"]
    experiment = server.wait_for(lambda: server.post_json(
        "/data/plugin/hparams/experiment", {"experimentName": ""}).get("hparamInfos"))
    names = {h["name"] for h in experiment}
    assert {"lr", "epochs", "~grad-clip.max_norm"} <= names
    # the table's columns: in each group (differing between runs or not), settings first
    for differs in (True, False):
        group = [h["name"] for h in experiment if bool(h.get("differs")) == differs]
        plugin_options = [name.startswith("~") for name in group]
        assert plugin_options == sorted(plugin_options), group
