"""SummaryWriter round trips, read back with tensorboard's own accumulators."""

import io
import os
import pathlib
import re
import socket
import warnings

import numpy as np
import pytest
from PIL import Image
from tb_helpers import event_files, read_events, run_python, scalar_points
from tensorboard.backend.event_processing import event_accumulator as legacy
from tensorboard.backend.event_processing import plugin_event_accumulator as plugin
from tensorboard.plugins.hparams import metadata as hp_metadata
from tensorboard.plugins.hparams import plugin_data_pb2
from tensorboard.plugins.projector.projector_config_pb2 import ProjectorConfig

import gradlog as gl
from gradlog.tensorboard import SummaryWriter
from gradlog.tensorboard.histogram import histogram_proto


def read(*parts):
    return pathlib.Path(*parts).read_text()


def accumulate(log_dir, python_loader_view=False):
    module = plugin if python_loader_view else legacy
    accumulator = module.EventAccumulator(log_dir, size_guidance={
        legacy.SCALARS: 0, legacy.HISTOGRAMS: 0, legacy.IMAGES: 0, legacy.TENSORS: 0})
    accumulator.Reload()
    return accumulator


def test_default_log_dir_is_runs_time_host_comment(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with SummaryWriter(comment="_lr0.1") as writer:
        log_dir = writer.get_logdir()
    pattern = rf"runs/[A-Z][a-z]{{2}}\d\d_\d\d-\d\d-\d\d_{re.escape(socket.gethostname())}_lr0.1"
    assert re.fullmatch(pattern, log_dir) and event_files(log_dir)
    assert SummaryWriter(tmp_path / "given", comment="x").get_logdir() == str(tmp_path / "given")


def test_scalars_keep_steps_values_and_walltimes(log_dir):
    with SummaryWriter(log_dir) as writer:
        for step in range(50):
            writer.add_scalar("train/loss", 1 / (step + 1), step, walltime=1000.0 + step)
        writer.add_scalar("no_step", 2.0)
        writer.add_scalar("special", float("nan"), 0)
        writer.add_scalar("special", float("inf"), 1)
        writer.add_scalar("special", -np.inf, 2)
    scalars = accumulate(log_dir).Scalars("train/loss")
    assert [(s.step, s.wall_time) for s in scalars] == [(i, 1000.0 + i) for i in range(50)]
    assert [s.value for s in scalars] == [np.float32(1 / (i + 1)) for i in range(50)]
    assert scalar_points(log_dir, "no_step") == [(0, 2.0)]
    special = [s.value for s in accumulate(log_dir).Scalars("special")]
    assert np.isnan(special[0]) and special[1:] == [np.inf, -np.inf]


@pytest.mark.parametrize("value", [3, 2.5, True, np.float64(0.5), np.array([[1.5]]),
                                   gl.tensor(4.5), gl.tensor([0.25], requires_grad=True)])
def test_scalars_accept_numbers_arrays_and_gradlog_tensors(log_dir, value):
    with SummaryWriter(log_dir) as writer:
        writer.add_scalar("v", value, gl.tensor(3))
    expected = np.asarray(value.detach().numpy() if hasattr(value, "detach") else value).item()
    assert scalar_points(log_dir, "v") == [(3, expected)]


def test_new_style_and_double_precision_scalars_are_float32_tensors(log_dir):
    with SummaryWriter(log_dir) as writer:
        writer.add_scalar("new", 0.5, 1, new_style=True)
        with pytest.warns(UserWarning, match="float32"):
            writer.add_scalar("double", 0.25, 2, double_precision=True)
    tensors = accumulate(log_dir, python_loader_view=True)
    assert [(e.step, e.tensor_proto.dtype) for e in tensors.Tensors("double")] == [(2, 1)]


def test_add_scalars_writes_one_run_per_key_tagged_main_tag(log_dir):
    with SummaryWriter(log_dir) as writer:
        for step in range(3):
            writer.add_scalars("loss/run", {"train": step, "val": 10 + step}, step)
    assert sorted(os.listdir(log_dir))[1:] == ["loss_run_train", "loss_run_val"]
    assert scalar_points(os.path.join(log_dir, "loss_run_val"), "loss/run") == [
        (0, 10.0), (1, 11.0), (2, 12.0)]


def test_histograms_round_trip_and_count_nonfinite(log_dir):
    values = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    with SummaryWriter(log_dir) as writer:
        writer.add_histogram("w", values, 0)
        writer.add_histogram("w", gl.tensor(values), 1, bins=10, max_bins=5)
        with pytest.warns(RuntimeWarning, match=r"'bad'.*2 non-finite.*'bad/nonfinite'"):
            writer.add_histogram("bad", np.array([1.0, np.nan, 2.0, np.inf]), 0)
            writer.flush()  # where the (background) histograms are sure to be computed
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # warned once per tag
            writer.add_histogram("bad", np.array([1.0, np.nan]), 1)
            writer.add_histogram("bad", np.array([1.0, 2.0]), 2)
            writer.flush()
        with pytest.warns(RuntimeWarning, match="'allnan'"):
            writer.add_histogram("allnan", np.full(3, np.nan), 0)
            writer.flush()
    accumulator = accumulate(log_dir)
    first, second = (e.histogram_value for e in accumulator.Histograms("w"))
    assert first.num == 1000 and sum(first.bucket) == 1000 and first.min == values.min()
    assert len(second.bucket) <= 5 and sum(second.bucket) == 1000
    assert [h.histogram_value.num for h in accumulator.Histograms("bad")] == [2, 1, 2]
    assert scalar_points(log_dir, "bad/nonfinite") == [(0, 2.0), (1, 1.0), (2, 0.0)]
    assert "allnan" not in accumulator.Tags()["histograms"]
    assert scalar_points(log_dir, "allnan/nonfinite") == [(0, 3.0)]


def test_one_histogram_under_several_tags_is_each_tags_histogram(log_dir):
    values = np.array([0.5, np.nan, 2.0, -3.0, np.inf], dtype=np.float32)
    with SummaryWriter(log_dir) as writer:
        with pytest.warns(RuntimeWarning) as warned, pytest.warns(UserWarning, match="'c_d'"):
            writer.add_histogram("a", values, 4, also_tags=("b", "c d"))
            writer.flush()
        writer.add_histogram("a", values[:1], 5, also_tags=("b",))
    assert {str(w.message).split("'")[1] for w in warned
            if w.category is RuntimeWarning} == {"a", "b", "c_d"}
    accumulator = accumulate(log_dir)
    alone = histogram_proto(values)[0]
    for tag in ("a", "b", "c_d"):
        (first, *rest) = accumulator.Histograms(tag)
        assert first.step == 4 and first.histogram_value.num == 3
        assert list(first.histogram_value.bucket) == list(alone.bucket)
        assert scalar_points(log_dir, f"{tag}/nonfinite")[0] == (4, 2.0)
    assert [h.step for h in accumulator.Histograms("b")] == [4, 5]
    with pytest.raises(TypeError, match="a tag must be a str"):
        SummaryWriter(log_dir).add_histogram("a", values, also_tags=(1,))


@pytest.mark.parametrize("background", [True, False])
def test_add_histograms_writes_one_event_equal_to_separate_calls(tmp_path, background):
    rng = np.random.default_rng(3)
    values = {"w/a": rng.standard_normal(1000).astype(np.float32),
              "w/b": gl.tensor(rng.standard_normal((5, 7))),
              "w/c": np.array([1.0, np.nan, -2.0])}
    together, apart = str(tmp_path / "together"), str(tmp_path / "apart")
    with SummaryWriter(together, background=background) as writer, \
            pytest.warns(RuntimeWarning, match="'w/c'"):
        writer.add_histograms(values, 3, also_tags={"w/a": ("v/a",)})
        writer.flush()
    with SummaryWriter(apart, background=background) as writer, \
            pytest.warns(RuntimeWarning, match="'w/c'"):
        writer.add_histogram("w/a", values["w/a"], 3, also_tags=("v/a",))
        writer.add_histogram("w/b", values["w/b"], 3)
        writer.add_histogram("w/c", values["w/c"], 3)
        writer.flush()
    (event,) = [e for e in read_events(together) if e.summary.value]
    assert event.step == 3
    assert [v.tag for v in event.summary.value] == ["w/a", "v/a", "w/b", "w/c", "w/c/nonfinite"]
    by_tag = {v.tag: v for v in event.summary.value}
    alone = [v for e in read_events(apart) for v in e.summary.value]
    assert len(alone) == 5
    for v in alone:  # the same histograms (and non-finite count) as the separate calls
        assert by_tag[v.tag].SerializeToString() == v.SerializeToString()
    assert by_tag["w/a"].histo.num == 1000 and by_tag["w/c/nonfinite"].simple_value == 1


def test_add_histograms_is_one_call_for_the_background_thread(log_dir):
    with SummaryWriter(log_dir, max_queue=2) as writer:
        arrays = {f"t{i}": np.arange(10.0) for i in range(6)}
        writer.add_histograms(arrays, 0)
        writer.add_histograms(arrays, 1)
        assert writer.queue_waits == 0  # two calls fit a queue of two
    assert [h.step for h in accumulate(log_dir).Histograms("t5")] == [0, 1]


def test_add_histograms_checks_every_tensor_and_its_also_tags(log_dir):
    with SummaryWriter(log_dir) as writer:
        with pytest.raises(ValueError, match=r"also_tags names tags that are not logged: \['b'\]"):
            writer.add_histograms({"a": np.ones(3)}, 0, also_tags={"b": ("c",)})
        with pytest.raises(ValueError):
            writer.add_histograms({"a": np.ones(3), "b": np.ones(3)}, 0, bins=[2.0, 1.0])
        writer.add_histograms({}, 0)  # nothing to log: no event
    assert not [e for e in read_events(log_dir) if e.summary.value]


def test_histogram_raw_drops_empty_end_buckets(log_dir):
    with SummaryWriter(log_dir) as writer:
        writer.add_histogram_raw("raw", min=0.5, max=2.5, num=3, sum=4.5, sum_squares=8.75,
                                 bucket_limits=[0, 1, 2, 3, 4], bucket_counts=[0, 1, 1, 1, 0],
                                 global_step=4)
        with pytest.raises(ValueError, match="len"):
            writer.add_histogram_raw("raw", 0, 1, 1, 1, 1, [1, 2], [1])
    (event,) = accumulate(log_dir).Histograms("raw")
    assert list(event.histogram_value.bucket_limit) == [1, 2, 3] and event.step == 4


def test_images_decode_to_the_written_pixels(log_dir):
    image = np.random.default_rng(1).random((3, 8, 6)).astype(np.float32)
    batch = np.random.default_rng(2).integers(0, 256, (3, 5, 4, 3), dtype=np.uint8)
    with SummaryWriter(log_dir) as writer:
        writer.add_image("img", image, 0)
        writer.add_image("hwc", gl.tensor(image.transpose(1, 2, 0)), 0, dataformats="HWC")
        writer.add_images("batch", batch, 1, dataformats="NHWC")
    accumulator = accumulate(log_dir)

    def pixels(tag):
        (event,) = accumulator.Images(tag)
        return np.asarray(Image.open(io.BytesIO(event.encoded_image_string)))

    expected = (image.transpose(1, 2, 0) * 255).clip(0, 255).astype(np.uint8)
    assert np.array_equal(pixels("img"), expected) and np.array_equal(pixels("hwc"), expected)
    assert np.array_equal(pixels("batch"), np.concatenate(list(batch), axis=1))


def test_figures_are_rendered(log_dir):
    pyplot = pytest.importorskip("matplotlib.pyplot")
    figure = pyplot.figure(figsize=(2, 1), dpi=50)
    with SummaryWriter(log_dir) as writer:
        writer.add_figure("fig", figure, 0)
        writer.add_figure("figs", [pyplot.figure(figsize=(1, 1), dpi=20)] * 2, 0)
    images = accumulate(log_dir)
    assert (images.Images("fig")[0].width, images.Images("fig")[0].height) == (100, 50)
    assert images.Images("figs")[0].width == 40
    assert not pyplot.fignum_exists(figure.number)


def test_text_pr_curve_and_custom_scalars(log_dir):
    with SummaryWriter(log_dir) as writer:
        writer.add_text("notes", "**hi** | a |\n|---|\n| 1 |", 3)
        writer.add_pr_curve("pr", np.array([1, 0, 1]), gl.tensor([0.9, 0.2, 0.6]), 5,
                            num_thresholds=11)
        writer.add_pr_curve_raw("praw", [3, 2], [1, 0], [0, 1], [0, 1], [0.75, 1.0],
                                [1.0, 0.67], 6, num_thresholds=2)
        writer.add_custom_scalars({"c": {"t": ["Multiline", ["loss"]]}})
        writer.add_custom_scalars_marginchart(["a", "b", "c"], category="m")
    accumulator = accumulate(log_dir, python_loader_view=True)
    content = accumulator.PluginTagToContent
    assert list(content("text")) == ["notes/text_summary"]
    (text,) = accumulator.Tensors("notes/text_summary")
    assert text.step == 3 and text.tensor_proto.string_val[0].startswith(b"**hi**")
    (pr,) = accumulator.Tensors("pr")
    assert pr.step == 5 and [d.size for d in pr.tensor_proto.tensor_shape.dim] == [6, 11]
    assert [e.step for e in accumulator.Tensors("praw")] == [6]
    assert len(accumulator.Tensors("custom_scalars__config__")) == 2


def test_hparams_write_a_trial_run_with_metrics(log_dir):
    with SummaryWriter(log_dir) as writer:
        writer.add_hparams({"lr": 0.1, "bn": False, "opt": "sgd"}, {"hparam/acc": 0.75},
                           run_name="trial0", global_step=2)
        writer.add_hparams({"lr": 0.2}, {"hparam/acc": 0.5})
    trials = sorted(d for d in os.listdir(log_dir) if os.path.isdir(os.path.join(log_dir, d)))
    assert trials[-1] == "trial0" and re.fullmatch(r"\d+\.\d+", trials[0])
    accumulator = accumulate(os.path.join(log_dir, "trial0"), python_loader_view=True)
    tags = accumulator.PluginTagToContent("hparams")
    assert set(tags) == {hp_metadata.EXPERIMENT_TAG, hp_metadata.SESSION_START_INFO_TAG,
                         hp_metadata.SESSION_END_INFO_TAG}
    start = plugin_data_pb2.HParamsPluginData.FromString(
        tags[hp_metadata.SESSION_START_INFO_TAG]).session_start_info
    assert start.hparams["bn"].bool_value is False and start.hparams["opt"].string_value == "sgd"
    assert scalar_points(os.path.join(log_dir, "trial0"), "hparam/acc") == [(2, 0.75)]


def test_add_summary_writes_a_prebuilt_summary_into_the_run_itself(log_dir):
    from gradlog.tensorboard.hparams import session_start_summaries

    with SummaryWriter(log_dir) as writer:
        writer.add_scalar("loss", 0.5, 3)
        for summary in session_start_summaries({"lr": 0.1}, ["loss"]):
            writer.add_summary(summary, 0)
        with pytest.raises(TypeError, match="tensorboard Summary, got dict"):
            writer.add_summary({"lr": 0.1}, 0)
    assert [d for d in os.listdir(log_dir) if os.path.isdir(os.path.join(log_dir, d))] == []
    accumulator = accumulate(log_dir, python_loader_view=True)
    assert set(accumulator.PluginTagToContent("hparams")) == {
        hp_metadata.EXPERIMENT_TAG, hp_metadata.SESSION_START_INFO_TAG}
    assert [e.step for e in accumulator.Tensors(hp_metadata.SESSION_START_INFO_TAG)] == [0]
    assert scalar_points(log_dir, "loss") == [(3, 0.5)]


def test_embeddings_write_projector_files(log_dir):
    points = np.arange(12.0).reshape(4, 3)
    with SummaryWriter(log_dir) as writer:
        writer.add_embedding(gl.tensor(points), metadata=["a", "b", "c", "d"],
                             label_img=np.ones((4, 3, 2, 2)), global_step=3, tag="emb/x")
        writer.add_embedding(points, metadata=[["a", 1], ["b", 2], ["c", 3], ["d", 4]],
                             metadata_header=["name", "n"])
        with pytest.raises(ValueError, match="metadata rows"):
            writer.add_embedding(points, metadata=["a"])
    from google.protobuf import text_format

    config = text_format.Parse(read(log_dir, "projector_config.pbtxt"),
                               ProjectorConfig())
    first, second = config.embeddings
    assert (first.tensor_name, first.tensor_path) == ("emb/x:00003", "00003/emb%2fx/tensors.tsv")
    rows = read(log_dir, first.tensor_path).splitlines()
    assert [list(map(float, r.split("\t"))) for r in rows] == points.tolist()
    assert read(log_dir, first.metadata_path) == "a\nb\nc\nd\n"
    assert list(first.sprite.single_image_dim) == [2, 2]
    with Image.open(os.path.join(log_dir, first.sprite.image_path)) as sprite:
        assert sprite.size == (4, 4)
    header = read(log_dir, second.metadata_path).splitlines()[0]
    assert header == "name\tn" and second.tensor_name == "default:00000"


def test_close_is_idempotent_and_a_later_add_starts_a_new_file(log_dir):
    writer = SummaryWriter(log_dir)
    writer.add_scalar("x", 1.0, 0)
    writer.close()
    writer.close()
    writer.add_scalar("x", 2.0, 1)
    writer.flush()
    writer.close()
    assert len(event_files(log_dir)) == 2
    assert scalar_points(log_dir, "x") == [(0, 1.0), (1, 2.0)]


def test_purge_step_hides_the_old_sessions_later_steps_on_the_python_loader(log_dir):
    with SummaryWriter(log_dir) as writer:
        for step in range(10):
            writer.add_scalar("loss", step, step)
    with SummaryWriter(log_dir, purge_step=5) as writer:
        for step in range(5, 8):
            writer.add_scalar("loss", 100 + step, step)
    loaded = [(s.step, s.value) for s in accumulate(log_dir).Scalars("loss")]
    assert loaded == [(s, s) for s in range(5)] + [(s, 100 + s) for s in range(5, 8)]


def test_import_is_cheap_and_depends_on_no_other_gradlog_package_but_storage():
    result = run_python("""
        import sys, gradlog.tensorboard
        heavy = ["PIL", "matplotlib", "tensorboard.plugins.hparams.metadata",
                 "tensorboard.plugins.projector.projector_config_pb2",
                 "tensorboard.compat.tensorflow_stub", "tensorboard.util.tensor_util"]
        print([name for name in heavy if name in sys.modules])
    """)
    assert result.stdout.strip() == "[]"
    import gradlog.storage  # noqa: F401 - (gl.storage)

    # The event-file writer stands on the storage floor, and the floor on nothing of gradlog's.
    floors = {gl.tensorboard: r"(?!\.tensorboard|\.storage)", gl.storage: r"(?!\.storage)"}
    for package, allowed in floors.items():
        directory = os.path.dirname(package.__file__)
        for name in os.listdir(directory):
            if name.endswith(".py"):
                source = read(directory, name)
                assert not re.search(rf"^\s*(from|import)\s+gradlog{allowed}", source, re.M)
                parents = re.findall(r"^\s*from\s+\.\.(\S*)\s+import\s+(\S+)", source, re.M)
                if package is gl.storage:
                    assert not parents, name
                else:  # ``from .. import storage`` or ``from ..storage.x import y`` only
                    # (and add_graph's tracer slot, a module that imports nothing: the engines
                    # fill it, which the writer's package must not import)
                    assert all(module.startswith("storage") or (module, imported) == ("", "storage")
                               or (module, imported) == ("utils.graph_tracer", "graph_tracer")
                               for module, imported in parents), (name, parents)
                assert "pickle" not in source, name
