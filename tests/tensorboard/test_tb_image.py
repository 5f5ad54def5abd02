"""Image builder: layouts, scaling, grids and PNG bytes, checked pixel by pixel."""

import io

import numpy as np
import pytest
from PIL import Image

from gradlog.tensorboard.image import image_summary, make_grid, to_hwc, to_uint8


def decode(summary):
    image = summary.value[0].image
    pixels = np.asarray(Image.open(io.BytesIO(image.encoded_image_string)))
    assert pixels.shape == (image.height, image.width, image.colorspace)
    return pixels


rng = np.random.default_rng(0)
CHW = rng.random((3, 5, 7)).astype(np.float32)
EXPECTED = (CHW.transpose(1, 2, 0) * 255).clip(0, 255).astype(np.uint8)


@pytest.mark.parametrize("layout, array", [
    ("CHW", CHW), ("HWC", CHW.transpose(1, 2, 0)), ("WHC", CHW.transpose(2, 1, 0)),
    ("chw", CHW)])
def test_every_layout_gives_the_same_pixels(layout, array):
    assert np.array_equal(decode(image_summary("i", array, layout)),
                          EXPECTED)


def test_float_is_scaled_by_255_clipped_and_truncated_and_uint8_kept():
    floats = np.array([[-0.5, 0.0, 0.5, 0.999, 1.0, 7.0, np.nan]], dtype=np.float64)
    assert list(to_uint8(floats)[0]) == [0, 0, 127, 254, 255, 255, 0]
    raw = np.array([[0, 128, 255]], dtype=np.uint8)
    assert np.array_equal(to_uint8(raw), raw)
    assert list(to_uint8(np.array([[True, False]]))[0]) == [255, 0]


def test_grey_is_repeated_to_rgb_and_rgba_is_kept():
    grey = rng.random((4, 6))
    pixels = decode(image_summary("g", grey, "HW"))
    assert pixels.shape == (4, 6, 3) and np.array_equal(pixels[..., 0], pixels[..., 2])
    one_channel = decode(image_summary("g", grey[None], "CHW"))
    assert np.array_equal(one_channel, pixels)
    rgba = rng.integers(0, 256, (4, 3, 5), dtype=np.uint8)
    assert np.array_equal(decode(image_summary("a", rgba, "CHW")), rgba.transpose(1, 2, 0))


def test_batches_are_tiled_eight_per_row_on_black():
    batch = rng.integers(1, 256, (10, 3, 2, 3), dtype=np.uint8)
    pixels = decode(image_summary("b", batch, "NCHW"))
    assert pixels.shape == (4, 24, 3)  # 2 rows of 8 tiles of 2x3
    assert np.array_equal(pixels[2:4, 3:6], batch[9].transpose(1, 2, 0))  # row 1, column 1
    assert not pixels[2:4, 6:].any()  # the unused tiles are black
    nhwc = decode(image_summary("b", batch.transpose(0, 2, 3, 1), "NHWC"))
    assert np.array_equal(nhwc, pixels)
    assert make_grid(batch[:1]).shape == (3, 2, 3)


def test_matches_pytorchs_add_image_pixels():
    torch_summary = pytest.importorskip("torch.utils.tensorboard.summary")
    for array, layout in ((CHW, "CHW"), (rng.random((2, 3, 4, 4)), "NCHW"),
                          (rng.random((4, 4)), "HW")):
        theirs = torch_summary.image("t", array, dataformats=layout)
        assert np.array_equal(decode(image_summary("t", array, layout)), decode(theirs))


def test_bad_layouts_are_rejected():
    with pytest.raises(ValueError, match="3-d image"):
        to_hwc(np.zeros((2, 2)), "CHW")
    with pytest.raises(ValueError, match="letters CHW once"):
        to_hwc(np.zeros((2, 2, 2)), "CCH")
    with pytest.raises(ValueError, match="1, 3 or 4 channels"):
        to_hwc(np.zeros((2, 4, 4)), "CHW")
