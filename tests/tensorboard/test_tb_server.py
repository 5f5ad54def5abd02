"""End to end: a real TensorBoard server, with each loader, shows everything the writer wrote.

Both servers (``--load_fast=false``: the Python multiplexer; ``--load_fast=true``: the Rust data
server) run on 127.0.0.1, port 0, over one logdir, and are stopped at the end of the module.
Everything is asserted through the HTTP JSON endpoints the dashboards use.
"""

import io
import math

import numpy as np
import pytest
from google.protobuf import text_format
from PIL import Image, ImageSequence
from tb_helpers import TensorBoardServer
from tensorboard.compat.proto.graph_pb2 import GraphDef

import gradlog as gl
from gradlog.examples.shapes import cnn
from gradlog.tensorboard import SummaryWriter, summary
from gradlog.tensorboard.audio import audio_summary
from gradlog.tensorboard.boxes import image_with_boxes_summary
from gradlog.tensorboard.graph import graph
from gradlog.tensorboard.histogram import histogram_proto

pytestmark = [pytest.mark.server, pytest.mark.slow]

WALL = 1_700_000_000.0
RNG = np.random.default_rng(7)
LOSS = [1 / (step + 1) for step in range(30)]
HISTOGRAMS = [RNG.standard_normal(2000).astype(np.float32) * (step + 1) for step in range(3)]
HISTOGRAMS[1][::100] = np.nan  # 20 values the histogram leaves out and counts
IMAGES = [RNG.random((3, 6, 8)).astype(np.float32) for _ in range(2)]
LABELS, PREDICTIONS = RNG.integers(0, 2, 200), RNG.random(200)
POINTS = RNG.standard_normal((20, 4)).astype(np.float32)
TEXT = "**bold** words\n\n| a | b |\n|---|---|\n| 1 | 2 |"
TRIALS = {"trial0": ({"lr": 0.1, "bn": True, "opt": "adam"}, {"hparam/acc": 0.9}),
          "trial1": ({"lr": 0.01, "bn": False, "opt": "sgd"}, {"hparam/acc": 0.8})}
MODEL, MODEL_INPUT = cnn(4), gl.randn(1, 1, 16, 16)
SOUND = np.sin(np.linspace(0, 40, 1600)).astype(np.float32) * 0.7
VERTICES = RNG.random((1, 4, 3)).astype(np.float32)
FACES = np.array([[[0, 1, 2], [0, 2, 3]]])
COLORS = RNG.integers(0, 256, (1, 4, 3))
PALETTE = RNG.integers(0, 256, (6, 3), dtype=np.uint8)
CLIPS = PALETTE[RNG.integers(0, 6, (2, 3, 5, 4))].transpose(0, 1, 4, 2, 3)  # (2, 3, 3, 5, 4)
BOXES = np.array([[1, 1, 6, 5]])
RUNS = {"main", "main/multi_a", "main/multi_b", "main/trial0", "main/trial1", "resumed"}


def write_logdir(root: str) -> None:
    with SummaryWriter(f"{root}/main") as writer:
        for step, loss in enumerate(LOSS):
            writer.add_scalar("loss", loss, step, walltime=WALL + step)
        for step, value in enumerate([math.nan, math.inf, -math.inf]):
            writer.add_scalar("special", value, step, walltime=WALL)
        with pytest.warns(RuntimeWarning, match="20 non-finite"):
            for step, values in enumerate(HISTOGRAMS):
                writer.add_histogram("weights", values, step, walltime=WALL + step)
            writer.flush()  # (computed in the background: warned by the flush at the latest)
        writer.add_histogram("constant", np.full(10, 2.0), 0, walltime=WALL)
        for step, image in enumerate(IMAGES):
            writer.add_image("sample", image, step, walltime=WALL + step)
        writer.add_text("notes", TEXT, 0, walltime=WALL)
        writer.add_pr_curve("pr", LABELS, PREDICTIONS, 0, num_thresholds=11, walltime=WALL)
        writer.add_custom_scalars({"Losses": {"loss and special": ["Multiline",
                                                                   ["loss", "special"]]}})
        writer.add_embedding(POINTS, metadata=[f"pt{i}" for i in range(20)])
        for step in range(3):
            writer.add_scalars("multi", {"a": step, "b": -step}, step, walltime=WALL + step)
        for name, (hparams, metrics) in TRIALS.items():
            writer.add_hparams(hparams, metrics, run_name=name)
        writer.add_graph(MODEL, MODEL_INPUT)
        writer.add_audio("sound", SOUND, 4, sample_rate=8000, walltime=WALL)
        writer.add_mesh("mesh", VERTICES, colors=COLORS, faces=FACES, global_step=6,
                        config_dict={"camera": {"cls": "PerspectiveCamera", "fov": 60}})
        writer.add_video("clip", CLIPS, 2, fps=8, walltime=WALL)
        writer.add_image_with_boxes("boxes", IMAGES[0], BOXES, 3, labels=["x"])
    with SummaryWriter(f"{root}/resumed") as writer:
        for step in range(10):
            writer.add_scalar("loss", step, step, walltime=WALL + step)
    with SummaryWriter(f"{root}/resumed", purge_step=5) as writer:
        for step in range(5, 8):
            writer.add_scalar("loss", 100 + step, step, walltime=WALL + 100 + step)


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("logdir"))
    write_logdir(root)
    started = {mode: TensorBoardServer(root, mode) for mode in ("false", "true")}
    try:
        for server in started.values():
            server.wait_ready()
        for server in started.values():  # the Rust loader loads in the background
            server.wait_for(lambda s=server: RUNS <= set(s.get("/data/runs"))
                            and len(s.get("/data/plugin/scalars/scalars", run="resumed",
                                          tag="loss")) == 8
                            and s.get("/data/plugin/pr_curves/tags").get("main")
                            and s.get("/data/plugin/mesh/tags").get("main")
                            and s.get("/data/plugin/audio/tags").get("main")
                            and s.get("/data/plugin/graphs/info").get("main"))
        yield started
    finally:
        for server in started.values():
            server.stop()


@pytest.fixture(params=["false", "true"], ids=["python-loader", "rust-loader"])
def server(request, servers):
    return servers[request.param]


def test_the_loader_under_test_is_the_one_asked_for(server):
    provider = server.get("/data/environment")["debug"]["data_provider"]
    assert provider.startswith("MultiplexerDataProvider" if server.load_fast == "false"
                               else "GrpcDataProvider")


def test_runs_and_dashboards(server):
    assert RUNS <= set(server.get("/data/runs"))
    listing = server.get("/data/plugins_listing")
    for dashboard in ("scalars", "histograms", "distributions", "images", "text", "hparams",
                      "pr_curves", "custom_scalars", "graphs", "audio", "mesh"):
        assert listing[dashboard]["enabled"], dashboard


def test_scalars_exact_steps_values_and_wall_times(server):
    series = server.get("/data/plugin/scalars/scalars", run="main", tag="loss")
    assert [(wall, step) for wall, step, _ in series] == [(WALL + s, s) for s in range(30)]
    assert [value for _, _, value in series] == [float(np.float32(v)) for v in LOSS]
    special = server.get("/data/plugin/scalars/scalars", run="main", tag="special")
    assert [value for _, _, value in special] == ["NaN", "Infinity", "-Infinity"]
    multi = server.get("/data/plugin/scalars/scalars", run="main/multi_b", tag="multi")
    assert [(step, value) for _, step, value in multi] == [(0, 0.0), (1, -1.0), (2, -2.0)]
    counted = server.get("/data/plugin/scalars/scalars", run="main", tag="weights/nonfinite")
    assert [(step, value) for _, step, value in counted] == [(1, 20.0), (2, 0.0)]


def test_purge_step_hides_the_earlier_sessions_later_steps(server):
    series = server.get("/data/plugin/scalars/scalars", run="resumed", tag="loss")
    assert [(step, value) for _, step, value in series] == (
        [(s, float(s)) for s in range(5)] + [(s, 100.0 + s) for s in range(5, 8)])


def test_histograms_count_every_finite_value_in_upright_buckets(server):
    series = server.get("/data/plugin/histograms/histograms", run="main", tag="weights")
    assert [step for _, step, _ in series] == [0, 1, 2]
    for (_, _, buckets), values in zip(series, HISTOGRAMS):
        finite = values[np.isfinite(values)]
        assert sum(count for _, _, count in buckets) == finite.size
        assert buckets[0][0] == float(finite.min()) and buckets[-1][1] == float(finite.max())
        assert all(left < right for left, right, _ in buckets)
        proto, _ = histogram_proto(values)
        assert [count for _, _, count in buckets] == list(proto.bucket)
    (_, _, constant), = server.get("/data/plugin/histograms/histograms", run="main",
                                   tag="constant")
    assert constant == [[1.5, 2.5, 10.0]]


def test_distributions_have_nine_monotone_basis_points(server):
    series = server.get("/data/plugin/distributions/distributions", run="main", tag="weights")
    assert len(series) == 3
    for _, _, points in series:
        assert [basis for basis, _ in points] == [0, 668, 1587, 3085, 5000, 6915, 8413, 9332,
                                                  10000]
        values = [value for _, value in points]
        assert values == sorted(values)


def test_images_decode_to_the_written_pixels(server):
    entries = server.get("/data/plugin/images/images", run="main", tag="sample", sample=0)
    assert [entry["step"] for entry in entries] == [0, 1]
    for entry, image in zip(entries, IMAGES):
        body, content_type = server.get("/data/plugin/images/individualImage?" + entry["query"])
        assert content_type == "image/png"
        pixels = np.asarray(Image.open(io.BytesIO(body)))
        expected = (image.transpose(1, 2, 0) * 255).clip(0, 255).astype(np.uint8)
        assert np.array_equal(pixels, expected)


def test_text_is_rendered_markdown(server):
    assert server.get("/data/plugin/text/tags")["main"] == ["notes/text_summary"]
    (entry,) = server.get("/data/plugin/text/text", run="main", tag="notes/text_summary")
    assert "<strong>bold</strong>" in entry["text"] and "<table>" in entry["text"]


def test_hparams_experiment_and_session_groups(server):
    experiment = server.post_json("/data/plugin/hparams/experiment", {"experimentName": ""})
    infos = {info["name"]: info for info in experiment["hparamInfos"]}
    assert {name: info["type"] for name, info in infos.items()} == {
        "lr": "DATA_TYPE_FLOAT64", "bn": "DATA_TYPE_BOOL", "opt": "DATA_TYPE_STRING"}
    assert infos["bn"]["domainDiscrete"] == [False, True]
    assert [m["name"]["tag"] for m in experiment["metricInfos"]] == ["hparam/acc"]
    request = {"experimentName": "", "startIndex": 0, "sliceSize": 10,
               "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE",
                                   "STATUS_RUNNING"],
               "colParams": [{"hparam": "lr"}, {"hparam": "bn"}, {"hparam": "opt"},
                             {"metric": {"tag": "hparam/acc"}}]}
    groups = server.post_json("/data/plugin/hparams/session_groups", request)["sessionGroups"]
    found = {g["sessions"][0]["name"]: g for g in groups}
    assert set(found) == {"main/trial0", "main/trial1"}
    for name, (hparams, metrics) in TRIALS.items():
        group = found[f"main/{name}"]
        assert group["hparams"] == hparams
        assert group["metricValues"][0]["value"] == pytest.approx(metrics["hparam/acc"])
        assert group["sessions"][0]["status"] == "STATUS_SUCCESS"


def test_pr_curves(server):
    (entry,) = server.get("/data/plugin/pr_curves/pr_curves", run="main", tag="pr")["main"]
    # The plugin trims the trailing thresholds where nothing is predicted positive.
    count = len(entry["precision"])
    value = summary.pr_curve("pr", LABELS, PREDICTIONS, num_thresholds=11).value[0]
    tp, fp, tn, fn, precision, recall = np.frombuffer(value.tensor.tensor_content,
                                                      "<f4").reshape(6, 11)
    assert entry["step"] == 0 and count == int(np.flatnonzero(tp + fp)[-1]) + 1
    assert entry["thresholds"] == pytest.approx([i / 10 for i in range(count)])
    assert entry["true_positives"] == tp[:count].tolist() and tp[0] == LABELS.sum()
    assert entry["false_negatives"] == fn[:count].tolist()
    assert entry["precision"] == pytest.approx(precision[:count].tolist())
    assert entry["recall"] == pytest.approx(recall[:count].tolist())


def test_custom_scalar_layout(server):
    layout = server.get("/data/plugin/custom_scalars/layout")
    (category,) = layout["category"]
    assert category["title"] == "Losses"
    assert category["chart"] == [{"title": "loss and special",
                                  "multiline": {"tag": ["loss", "special"]}}]


def test_projector_serves_the_embedding(server):
    assert "main" in server.get("/data/plugin/projector/runs")
    (embedding,) = server.get("/data/plugin/projector/info", run="main")["embeddings"]
    assert embedding["tensorName"] == "default:00000" and embedding["tensorShape"] == [20, 4]
    body, _ = server.get("/data/plugin/projector/tensor", run="main", name="default:00000")
    assert np.array_equal(np.frombuffer(body, "<f4").reshape(20, 4), POINTS)
    labels, _ = server.get("/data/plugin/projector/metadata", run="main", name="default:00000")
    assert labels.decode().split("\n")[:2] == ["pt0", "pt1"]


def test_graphs_dashboard_shows_the_example_model_by_layer(server):
    info = server.get("/data/plugin/graphs/info")["main"]
    assert info["run_graph"] and "step1" in info["tags"]
    body, content_type = server.get("/data/plugin/graphs/graph", run="main", conceptual="false")
    served = text_format.Parse(body.decode(), GraphDef())
    assert served == graph(MODEL, MODEL_INPUT)[0]
    names = {node.name for node in served.node}
    for name, module in MODEL.named_children():
        assert any(n.startswith(f"Sequential/{type(module).__name__}[{name}]/") for n in names)


def test_audio_dashboard_plays_the_wav(server):
    tags = server.get("/data/plugin/audio/tags")["main"]
    assert tags["sound"]["samples"] == 1
    (entry,) = server.get("/data/plugin/audio/audio", run="main", tag="sound")
    assert entry["step"] == 4 and entry["wall_time"] == WALL
    body, _ = server.get("/data/plugin/audio/individualAudio?" + entry["query"])
    assert body == audio_summary("sound", SOUND, 8000).value[0].audio.encoded_audio_string
    assert body[:4] == b"RIFF" and body[8:12] == b"WAVE"


def test_mesh_dashboard_serves_vertices_faces_and_colors(server):
    assert server.get("/data/plugin/mesh/tags")["main"] == {"mesh": {"samples": 1}}
    meshes = server.get("/data/plugin/mesh/meshes", run="main", tag="mesh", sample=0)
    assert {(m["content_type"], tuple(m["data_shape"]), m["step"]) for m in meshes} == {
        (1, (1, 4, 3), 6), (2, (1, 2, 3), 6), (3, (1, 4, 3), 6)}
    assert all('"fov": 60' in m["config"] for m in meshes)
    for kind, dtype, expected in (("VERTEX", "<f4", VERTICES), ("FACE", "<i4", FACES),
                                  ("COLOR", "u1", COLORS)):
        body, _ = server.get("/data/plugin/mesh/data", run="main", tag="mesh", sample=0,
                             content_type=kind, step=6)
        assert np.array_equal(np.frombuffer(body, dtype), expected[0].ravel()), kind


def test_images_dashboard_shows_the_video_and_the_boxes(server):
    (entry,) = server.get("/data/plugin/images/images", run="main", tag="clip", sample=0)
    body, content_type = server.get("/data/plugin/images/individualImage?" + entry["query"])
    assert content_type == "image/gif" and entry["step"] == 2
    frames = [np.asarray(f.convert("RGB")) for f in ImageSequence.Iterator(Image.open(
        io.BytesIO(body)))]
    assert len(frames) == 3
    for t, frame in enumerate(frames):  # two clips side by side, 6 colours: exact
        assert np.array_equal(frame, np.concatenate(
            [CLIPS[i, t].transpose(1, 2, 0) for i in range(2)], axis=1))
    (entry,) = server.get("/data/plugin/images/images", run="main", tag="boxes", sample=0)
    body, content_type = server.get("/data/plugin/images/individualImage?" + entry["query"])
    expected = image_with_boxes_summary("boxes", IMAGES[0], BOXES, labels=["x"])
    assert content_type == "image/png" and entry["step"] == 3
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(body))), np.asarray(Image.open(
        io.BytesIO(expected.value[0].image.encoded_image_string))))
