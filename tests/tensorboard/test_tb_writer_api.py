"""The newer SummaryWriter methods and attributes, call by call against torch.utils.tensorboard,
both read back with TensorBoard's accumulators; PyTorch tensors of every dtype."""

import inspect
import io

import numpy as np
import pytest
from PIL import Image, ImageSequence
from tensorboard.backend.event_processing import event_accumulator as legacy
from tensorboard.backend.event_processing import plugin_event_accumulator as plugin
from tensorboard.util import tensor_util

from gradlog.tensorboard import SummaryWriter
from gradlog.tensorboard.file_writer import FileWriter

torch = pytest.importorskip("torch")
from torch.utils.tensorboard import SummaryWriter as TorchWriter  # noqa: E402

GUIDANCE = {legacy.SCALARS: 0, legacy.HISTOGRAMS: 0, legacy.IMAGES: 0, legacy.TENSORS: 0,
            legacy.AUDIO: 0}


def accumulate(log_dir, python_loader_view=False):
    module = plugin if python_loader_view else legacy
    accumulator = module.EventAccumulator(str(log_dir), size_guidance=GUIDANCE)
    accumulator.Reload()
    return accumulator


def both(tmp_path, calls):
    """Run ``calls(writer)`` on a gradlog and a PyTorch writer; their log dirs."""
    dirs = []
    for name, writer_class in (("gradlog", SummaryWriter), ("torch", TorchWriter)):
        with writer_class(str(tmp_path / name)) as writer:
            calls(writer)
        dirs.append(tmp_path / name)
    return dirs


def pixels(encoded: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(encoded)))


def tensors(accumulator, tag):
    return [(e.step, tensor_util.make_ndarray(e.tensor_proto)) for e in accumulator.Tensors(tag)]


def test_audio_mesh_boxes_and_tensors_read_back_as_pytorchs(tmp_path):
    rng = np.random.default_rng(0)
    clip = torch.tensor(np.sin(np.linspace(0, 30, 800)) * 0.8, dtype=torch.float32)[None]
    vertices = torch.tensor(rng.random((1, 5, 3)), dtype=torch.float32)
    colors = torch.tensor(rng.integers(0, 256, (1, 5, 3)), dtype=torch.uint8)
    faces = torch.tensor([[[0, 1, 2], [2, 3, 4]]], dtype=torch.int32)
    image = torch.rand(3, 24, 30, generator=torch.Generator().manual_seed(1))
    corners = torch.tensor([[1.0, 2.0, 20.0, 15.0]])

    def calls(writer):
        writer.add_audio("sound", clip, 3, sample_rate=16000)
        writer.add_mesh("mesh", vertices, colors=colors, faces=faces,
                        config_dict={"camera": {"cls": "PerspectiveCamera", "fov": 75}},
                        global_step=2)
        writer.add_image_with_boxes("boxes", image, corners, 4, labels=["box"])
        writer.add_tensor("tensor", torch.arange(6, dtype=torch.int64).reshape(2, 3), 5)

    ours, theirs = both(tmp_path, calls)
    a, b = accumulate(ours), accumulate(theirs)
    (mine,), (torch_audio,) = a.Audio("sound"), b.Audio("sound")
    assert mine.step == 3 and mine.encoded_audio_string == torch_audio.encoded_audio_string
    assert (mine.sample_rate, mine.length_frames) == (16000, 800)
    (mine,), (torch_image,) = a.Images("boxes"), b.Images("boxes")
    assert mine.step == 4
    assert np.array_equal(pixels(mine.encoded_image_string),
                          pixels(torch_image.encoded_image_string))
    a, b = accumulate(ours, True), accumulate(theirs, True)
    assert sorted(a.PluginTagToContent("mesh")) == ["mesh_COLOR", "mesh_FACE", "mesh_VERTEX"]
    for tag in ("mesh_VERTEX", "mesh_FACE", "mesh_COLOR"):
        (step, mine), = tensors(a, tag)
        (_, torch_tensor), = tensors(b, tag)
        assert step == 2 and np.array_equal(mine, torch_tensor)
        assert a.SummaryMetadata(tag) == b.SummaryMetadata(tag)
    (step, mine), = tensors(a, "tensor")
    assert step == 5 and mine.dtype == np.int64 and mine.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert mine.tolist() == tensors(b, "tensor")[0][1].tolist()


def test_a_fractional_sample_rate_reads_back_as_pytorchs(tmp_path):
    clip = torch.tensor(np.sin(np.linspace(0, 9, 300)) * 0.5, dtype=torch.float32)

    def calls(writer):
        writer.add_audio("sound", clip, 1, sample_rate=8000.6)

    ours, theirs = both(tmp_path, calls)
    (mine,), (torch_audio,) = accumulate(ours).Audio("sound"), accumulate(theirs).Audio("sound")
    assert mine.encoded_audio_string == torch_audio.encoded_audio_string  # a 8001 Hz WAV
    assert mine.sample_rate == torch_audio.sample_rate == pytest.approx(8000.6)


def test_flat_single_boxes_are_refused_as_pytorch_refuses_them(tmp_path):
    image, box = torch.rand(3, 8, 8), torch.tensor([1.0, 2.0, 5.0, 6.0])
    with pytest.raises(IndexError), TorchWriter(str(tmp_path / "torch")) as theirs:
        theirs.add_image_with_boxes("b", image, box)
    with SummaryWriter(str(tmp_path / "gradlog"), background=False) as ours:
        with pytest.raises(ValueError, match=r"box_tensor should have shape \(N, 4\), got \(4,\)"):
            ours.add_image_with_boxes("b", image, box)


def test_video_is_an_animated_gif_in_the_images_plugin(log_dir):
    clips = torch.zeros(2, 4, 3, 8, 8, dtype=torch.uint8)
    for t in range(4):
        clips[:, t, t % 3, 2 * t:2 * t + 2] = 255  # a red, green, blue, red stripe moving down
    with SummaryWriter(log_dir) as writer:
        writer.add_video("clip", clips, 7, fps=10)
    (event,) = accumulate(log_dir).Images("clip")
    gif = Image.open(io.BytesIO(event.encoded_image_string))
    frames = [np.asarray(frame.convert("RGB")) for frame in ImageSequence.Iterator(gif)]
    assert event.step == 7 and (event.width, event.height) == (16, 8) and len(frames) == 4
    for t, frame in enumerate(frames):  # two clips side by side
        expected = np.concatenate([clips[i, t].permute(1, 2, 0).numpy() for i in range(2)], 1)
        assert np.array_equal(frame, expected)


def test_onnx_graph_reads_back_as_pytorchs(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])],
        "g", [x], [y]))
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    ours, theirs = both(tmp_path, lambda writer: writer.add_onnx_graph(str(path)))
    assert accumulate(ours).Graph() == accumulate(theirs).Graph()
    assert [n.op for n in accumulate(ours).Graph().node] == ["Variable", "Variable", "Relu",
                                                             "Neg"]


def test_pr_curve_raw_with_fewer_rows_and_one_threshold_as_pytorch(tmp_path):
    def calls(writer):  # PyTorch's own usage: 5 entries, num_thresholds=127
        writer.add_pr_curve_raw("short", [75, 64, 21, 5, 0], [150, 105, 18, 0, 0],
                                [0, 45, 132, 150, 150], [0, 11, 54, 70, 75],
                                [.33, .38, .54, 1, 0], [1, .85, .28, .07, 0], 0)
        writer.add_pr_curve("one", np.array([1, 0, 1, 1]), np.array([0.9, 0.2, 0.4, 1.0]), 1,
                            num_thresholds=1)

    ours, theirs = both(tmp_path, calls)
    a, b = accumulate(ours, True), accumulate(theirs, True)
    for tag, shape in (("short", (6, 5)), ("one", (6, 1))):
        (_, mine), = tensors(a, tag)
        (_, torch_curve), = tensors(b, tag)
        assert mine.shape == shape and np.allclose(mine, torch_curve)
        assert a.SummaryMetadata(tag) == b.SummaryMetadata(tag)
    with SummaryWriter(tmp_path / "bad") as writer, pytest.raises(ValueError, match="1, 2"):
        writer.add_pr_curve_raw("bad", [1], [1, 2], [1], [1], [1], [1])


DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32,
          torch.int64, torch.uint8]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_torch_tensors_of_any_dtype_log_the_values_pytorch_logs(tmp_path, dtype):
    values = torch.tensor([[0.0, 0.5, 1.0, 3.0], [2.0, 0.25, 1.5, 7.0]]).to(dtype)
    floating = dtype.is_floating_point
    source = values.clone().requires_grad_(True) if floating else values

    def calls(writer):
        writer.add_scalar("scalar", source[0, 1] * 1, 0)
        writer.add_histogram("hist", source * 1, 0, bins=4)
        writer.add_image("image", (source / 8 if floating else source)[None], 0)

    ours, theirs = both(tmp_path, calls)
    a, b = accumulate(ours), accumulate(theirs)
    assert a.Scalars("scalar")[0].value == b.Scalars("scalar")[0].value
    mine, torch_histogram = (x.Histograms("hist")[0].histogram_value for x in (a, b))
    assert (mine.min, mine.max, mine.num, mine.sum) == (
        torch_histogram.min, torch_histogram.max, torch_histogram.num, torch_histogram.sum)
    assert list(mine.bucket) == list(torch_histogram.bucket)[1:]  # PyTorch's empty first one
    assert np.array_equal(pixels(a.Images("image")[0].encoded_image_string),
                          pixels(b.Images("image")[0].encoded_image_string))


def test_bfloat16_beyond_float16s_range_is_exact(log_dir):
    value = torch.tensor([1e10, -3e38], dtype=torch.bfloat16, requires_grad=True)
    with SummaryWriter(log_dir) as writer:
        writer.add_scalar("big", value[0], 0)  # PyTorch, through float16: inf
        writer.add_histogram("big", value, 0)
    expected = value.detach().float().numpy()
    assert accumulate(log_dir).Scalars("big")[0].value == expected[0]
    histogram = accumulate(log_dir).Histograms("big")[0].histogram_value
    assert (histogram.min, histogram.max) == (expected[1], expected[0])


def test_writer_attributes_are_pytorchs(tmp_path):
    writer = SummaryWriter(tmp_path / "run")
    theirs = TorchWriter(str(tmp_path / "torch"))
    assert writer.default_bins == theirs.default_bins
    assert isinstance(writer.file_writer, FileWriter)
    assert writer.file_writer.get_logdir() == str(tmp_path / "run")
    writer.add_scalars("loss", {"train": 1.0, "val": 2.0}, 0)
    assert sorted(writer.all_writers) == [str(tmp_path / "run"), str(tmp_path / "run/loss_train"),
                                          str(tmp_path / "run/loss_val")]
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary

    writer.file_writer.add_event(Event(step=9, summary=Summary(value=[
        Summary.Value(tag="raw", simple_value=4.0)])), walltime=123.0)
    writer.file_writer.add_summary(Summary(value=[Summary.Value(tag="raw", simple_value=5.0)]),
                                   10, 124.0)
    writer.close()
    assert writer.file_writer is None and writer.all_writers is None
    theirs.close()
    assert [(s.step, s.wall_time, s.value) for s in accumulate(tmp_path / "run").Scalars("raw")] \
        == [(9, 123.0, 4.0), (10, 124.0, 5.0)]
    assert list(inspect.signature(SummaryWriter.__exit__).parameters) == list(
        inspect.signature(TorchWriter.__exit__).parameters)
    for name in ("add_graph", "add_audio", "add_video", "add_mesh", "add_image_with_boxes",
                 "add_tensor", "add_onnx_graph"):
        mine = inspect.signature(getattr(SummaryWriter, name)).parameters
        torch_params = inspect.signature(getattr(TorchWriter, name)).parameters
        assert [(p.name, p.default) for p in mine.values()] == [
            (p.name, p.default) for p in torch_params.values()], name


def test_file_writer_reopens_in_a_new_file(log_dir):
    writer = FileWriter(log_dir)
    writer.close()
    first = writer.event_writer.path
    writer.reopen()
    assert writer.event_writer.path != first and not writer.event_writer.closed
    writer.reopen()  # open: nothing happens
    writer.close()


def test_documented_differences_from_pytorch(tmp_path):
    rgba = np.random.default_rng(2).random((2, 4, 5, 6)).astype(np.float32)
    with SummaryWriter(tmp_path / "run") as writer:
        writer.add_images("rgba", rgba, 0)  # PyTorch: AssertionError (3 channels only)
        with pytest.raises(ValueError, match=r"a single value.*\(2,\)"):
            writer.add_scalar("two", np.array([1.0, 2.0]))  # PyTorch: AssertionError
    with TorchWriter(str(tmp_path / "torch")) as theirs, pytest.raises(AssertionError):
        theirs.add_images("rgba", rgba, 0)
    (event,) = accumulate(tmp_path / "run").Images("rgba")
    assert pixels(event.encoded_image_string).shape == (5, 12, 4)
