"""Pure builders of the newer SummaryWriter methods (no files): tensors, audio, video, meshes,
images with boxes, ONNX graphs. PyTorch's own builders are the oracle where it has them."""

import io
import wave

import numpy as np
import pytest
from PIL import Image, ImageSequence
from tb_helpers import run_python
from tensorboard.plugins.mesh import plugin_data_pb2 as mesh_data
from tensorboard.util import tensor_util

from gradlog.tensorboard import audio, boxes, mesh, onnx_graph, tensor, video


def torch_summary():
    return pytest.importorskip("torch.utils.tensorboard.summary")


def png_pixels(summary):
    return np.asarray(Image.open(io.BytesIO(summary.value[0].image.encoded_image_string)))


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int8", "int16", "int32",
                                   "int64", "uint8", "uint16", "uint32", "uint64", "bool",
                                   "complex64", "complex128"])
def test_tensor_comes_back_with_its_dtype_shape_and_values(dtype):
    array = (np.arange(6).reshape(2, 3) % 3).astype(dtype)
    value = tensor.tensor_summary("t", array).value[0]
    assert value.metadata.plugin_data.plugin_name == "tensor"
    decoded = tensor_util.make_ndarray(value.tensor)
    assert decoded.dtype == array.dtype and np.array_equal(decoded, array)


def test_tensor_of_strings_and_bad_dtypes():
    decoded = tensor_util.make_ndarray(tensor.tensor_proto(np.array([["a", "b"], ["c", "é"]])))
    assert decoded.tolist() == [[b"a", b"b"], [b"c", "é".encode()]]
    with pytest.raises(ValueError, match="unsupported dtype datetime64"):
        tensor.tensor_proto(np.array(["2020-01-01"], dtype="datetime64[D]"))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_audio_is_pytorchs_wav_byte_for_byte(dtype):
    summary = torch_summary()
    clip = np.sin(np.linspace(0, 20, 400)).astype(dtype)[None] * 0.9
    ours = audio.audio_summary("a", clip, sample_rate=8000).value[0].audio
    assert ours == summary.audio("a", clip, sample_rate=8000).value[0].audio
    with wave.open(io.BytesIO(ours.encoded_audio_string)) as wav:
        assert (wav.getnchannels(), wav.getsampwidth(), wav.getframerate()) == (1, 2, 8000)
        samples = np.frombuffer(wav.readframes(wav.getnframes()), "<i2")
    assert np.array_equal(samples, (clip[0] * 32767).astype(np.int16))


def test_audio_refuses_a_sample_rate_that_rounds_below_one():
    clip = np.zeros(5, np.float32)  # (wave's own error was "sampling rate not specified")
    with pytest.raises(ValueError, match="sample_rate must be at least 1 once rounded, got 0.3"):
        audio.audio_summary("a", clip, sample_rate=0.3)
    wav = audio.audio_summary("a", clip, sample_rate=0.7).value[0].audio.encoded_audio_string
    with wave.open(io.BytesIO(wav)) as opened:  # rounded to 1 in the header, as PyTorch
        assert opened.getframerate() == 1


def test_audio_clips_loud_samples_and_rejects_several_channels():
    with pytest.warns(UserWarning, match="clipped"):
        loud = audio.audio_summary("a", np.array([2.0, -3.0, 0.5, np.nan]), 100)
    with wave.open(io.BytesIO(loud.value[0].audio.encoded_audio_string)) as wav:
        assert np.frombuffer(wav.readframes(4), "<i2").tolist() == [32767, -32767, 16383, 0]
    with pytest.raises(ValueError, match=r"shape \(2, 5\)"):
        audio.audio_summary("a", np.zeros((2, 5)))
    half = audio.audio_summary("a", np.ones(3, np.float16)).value[0].audio
    with wave.open(io.BytesIO(half.encoded_audio_string)) as wav:  # no float16 overflow
        assert np.frombuffer(wav.readframes(3), "<i2").tolist() == [32767] * 3


def test_video_tiles_the_batch_as_pytorch_does():
    clips = np.random.default_rng(0).integers(0, 256, (3, 2, 3, 4, 5), dtype=np.uint8)
    frames = video.video_frames(clips)  # 3 clips -> padded to 4, one row
    assert frames.shape == (2, 4, 20, 3)
    for i in range(3):
        assert np.array_equal(frames[:, :, 5 * i:5 * i + 5], clips[i].transpose(0, 2, 3, 1))
    assert not frames[:, :, 15:].any()
    square = video.video_frames(np.ones((4, 1, 1, 2, 2), np.float32) * 0.5)
    assert square.shape == (1, 4, 4, 1) and (square == 127).all()  # 2 x 2, floats * 255
    with pytest.raises(ValueError, match=r"\(N, T, C, H, W\).*\(2, 3, 4\)"):
        video.video_frames(np.zeros((2, 3, 4)))


def test_video_is_an_animated_gif_of_the_frames():
    palette = np.random.default_rng(1).integers(0, 256, (8, 3), dtype=np.uint8)
    picks = np.random.default_rng(2).integers(0, 8, (1, 3, 6, 7))
    clips = palette[picks].transpose(0, 1, 4, 2, 3)  # (1, T=3, C=3, H=6, W=7), 8 colours
    value = video.video_summary("v", clips, fps=5).value[0]
    assert (value.image.height, value.image.width, value.image.colorspace) == (6, 7, 3)
    gif = Image.open(io.BytesIO(value.image.encoded_image_string))
    assert gif.format == "GIF" and gif.info["loop"] == 0
    decoded = [np.asarray(frame.convert("RGB")) for frame in ImageSequence.Iterator(gif)]
    assert len(decoded) == 3 and gif.info["duration"] == 200
    for frame, expected in zip(decoded, clips[0].transpose(0, 2, 3, 1)):
        assert np.array_equal(frame, expected)


def test_mesh_matches_pytorchs_parts_and_metadata():
    summary = torch_summary()
    rng = np.random.default_rng(3)
    vertices = rng.random((1, 4, 3)).astype(np.float32)
    colors = rng.integers(0, 256, (1, 4, 3))
    faces = np.array([[[0, 1, 2], [1, 2, 3]]])
    config = {"camera": {"cls": "PerspectiveCamera", "fov": 75}}
    ours = mesh.mesh_summary("m", vertices, colors, faces, config).value
    theirs = summary.mesh("m", vertices, colors, faces, config).value
    assert [v.tag for v in ours] == [v.tag for v in theirs] == ["m_VERTEX", "m_FACE", "m_COLOR"]
    for mine, torch_value in zip(ours, theirs):
        assert mine.metadata == torch_value.metadata
        assert np.array_equal(tensor_util.make_ndarray(mine.tensor),
                              tensor_util.make_ndarray(torch_value.tensor))
    content = mesh_data.MeshPluginData.FromString(ours[1].metadata.plugin_data.content)
    assert list(content.shape) == [1, 2, 3] and '"fov": 75' in content.json_config
    point_cloud = mesh.mesh_summary("p", vertices).value
    assert [v.tag for v in point_cloud] == ["p_VERTEX"]
    with pytest.raises(ValueError, match=r"faces should have shape \(B, N, 3\), got \(2, 3\)"):
        mesh.mesh_summary("m", vertices, faces=faces[0])


@pytest.mark.parametrize("rescale, labels", [(1, ["cat", "dog"]), (2, None), (0.5, "one")])
def test_boxes_are_drawn_with_pytorchs_pixels(rescale, labels):
    summary = torch_summary()
    image = np.random.default_rng(4).random((3, 40, 48)).astype(np.float32)
    corners = np.array([[2, 3, 30, 25], [10, 12, 40, 38]], dtype=np.float32)
    if labels == "one":
        corners = corners[:1]
    ours = boxes.image_with_boxes_summary("b", image, corners, rescale, "CHW", labels)
    theirs = summary.image_boxes("b", image, corners, rescale, "CHW",  # (its writer makes
                                 [labels] if isinstance(labels, str) else labels)  # the list)
    assert np.array_equal(png_pixels(ours), png_pixels(theirs))
    assert png_pixels(ours).shape == (int(40 * rescale), int(48 * rescale), 3)
    if rescale == 1:
        assert (png_pixels(ours)[3, 10:20] == [255, 0, 0]).all()  # the top edge of box 0


def test_boxes_check_their_shape_and_labels():
    image = np.zeros((8, 8, 3), np.uint8)
    with pytest.raises(ValueError, match=r"\(N, 4\), got \(2, 3\)"):
        boxes.image_with_boxes_summary("b", image, np.zeros((2, 3)), dataformats="HWC")
    with pytest.warns(UserWarning, match="1 labels for 2 boxes"):
        boxes.image_with_boxes_summary("b", image, np.ones((2, 4)), dataformats="HWC",
                                       labels=["x"])


def onnx_model_bytes():
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 3, 8, 8])
    w = helper.make_tensor_value_info("W", TensorProto.FLOAT, [4, 3, 3, 3])
    y = helper.make_tensor_value_info("Y", TensorProto.INT64, [1, 4])
    nodes = [helper.make_node("Conv", ["X", "W"], ["C"], kernel_shape=[3, 3], pads=[1] * 4,
                              name="conv"),
             helper.make_node("LeakyRelu", ["C"], ["R"], alpha=0.25),
             helper.make_node("Constant", [], ["K"], value=helper.make_tensor(
                 "k", TensorProto.FLOAT, [2], [1.5, 2.5])),
             helper.make_node("ArgMax", ["R"], ["Y"], axis=1, keepdims=0, mode=b"x")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x, w], [y]))
    return model.SerializeToString()


def test_onnx_graph_is_pytorchs(tmp_path):
    data = onnx_model_bytes()
    writer_module = pytest.importorskip("torch.utils.tensorboard._onnx_graph")
    path = tmp_path / "model.onnx"
    path.write_bytes(data)
    ours = onnx_graph.load_onnx_graph(path)
    assert ours == writer_module.load_onnx_graph(str(path))
    assert [(n.name, n.op) for n in ours.node][:4] == [("X", "Variable"), ("W", "Variable"),
                                                       ("Y", "Variable"), ("C", "Conv")]
    assert ours.node[3].attr["parameters"].s == (b"kernel_shape = [3, 3] = 7, "
                                                 b"pads = [1, 1, 1, 1] = 7")


def test_onnx_graph_needs_no_onnx_package(tmp_path):
    path = tmp_path / "model.onnx"
    path.write_bytes(onnx_model_bytes())
    result = run_python("""
        import sys
        from gradlog.tensorboard.onnx_graph import load_onnx_graph
        graph = load_onnx_graph(sys.argv[1])
        print(len(graph.node), "onnx" in sys.modules)
    """, str(path))
    assert result.stdout.split() == ["7", "False"]
    with pytest.raises(ValueError, match="not an ONNX model"):
        onnx_graph.onnx_graph(b"\xff\xff\xff")


@pytest.mark.parametrize("rate", [8000.6, 22050.5, 11025.4])
def test_a_fractional_sample_rate_is_rounded_as_pytorchs(rate):
    summary = torch_summary()
    clip = np.sin(np.linspace(0, 5, 100)).astype(np.float32) * 0.5
    ours = audio.audio_summary("a", clip, sample_rate=rate).value[0].audio
    assert ours == summary.audio("a", clip, sample_rate=rate).value[0].audio
    with wave.open(io.BytesIO(ours.encoded_audio_string)) as wav:
        assert wav.getframerate() == round(rate)  # (22050.5 -> 22050, as Python rounds)


def test_an_rgba_video_drops_its_alpha():
    rng = np.random.default_rng(5)
    rgb = rng.integers(0, 256, (2, 3, 3, 4, 5), dtype=np.uint8)
    alpha = rng.integers(0, 256, (2, 3, 1, 4, 5), dtype=np.uint8)
    rgba = np.concatenate([rgb, alpha], axis=2)
    assert np.array_equal(video.video_frames(rgba), video.video_frames(rgb))
    value = video.video_summary("v", rgba.astype(np.float32) / 255, fps=4).value[0]
    assert value.image.colorspace == 3
    gif = Image.open(io.BytesIO(value.image.encoded_image_string))
    assert gif.n_frames == 3 and gif.size == (10, 4)
    with pytest.raises(ValueError, match="frames need 1, 3 or 4 channels, got 2"):
        video.video_frames(np.zeros((1, 1, 2, 4, 4)))


def test_a_flat_single_box_is_refused_as_pytorch_refuses_it():
    summary = torch_summary()
    image = np.zeros((3, 8, 8), np.float32)
    with pytest.raises(IndexError):
        summary.image_boxes("b", image, np.array([1.0, 2.0, 5.0, 6.0]))
    with pytest.raises(ValueError, match=r"\(N, 4\), got \(4,\)"):
        boxes.image_with_boxes_summary("b", image, np.array([1.0, 2.0, 5.0, 6.0]))
    one = boxes.image_with_boxes_summary("b", image, np.array([[1.0, 2.0, 5.0, 6.0]]))
    assert np.array_equal(png_pixels(one), png_pixels(summary.image_boxes(
        "b", image, np.array([[1.0, 2.0, 5.0, 6.0]]))))
