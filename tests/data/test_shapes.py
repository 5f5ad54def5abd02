"""Tests for the built-in Shapes dataset: layout, determinism, drawing and argument checks."""

import math
import re

import numpy as np
import pytest

from gradlog.data.shapes import SUPPORTED_CLASSES, Shapes


@pytest.fixture(scope="module")
def single() -> Shapes:
    return Shapes(2000, seed=0)


@pytest.fixture(scope="module")
def pair() -> Shapes:
    return Shapes(1000, objects=2, seed=0)


def _bbox(mask: np.ndarray) -> np.ndarray:
    rows, cols = np.nonzero(mask.any(axis=1))[0], np.nonzero(mask.any(axis=0))[0]
    return mask[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1]


def _ring(masks: np.ndarray) -> np.ndarray:
    """Pixels 4-adjacent to a mask but outside it (masks never touch the border, so np.roll's
    wrap-around brings in only empty pixels)."""
    grown = masks.copy()
    for axis in (-1, -2):
        for shift in (1, -1):
            grown |= np.roll(masks, shift, axis=axis)
    return grown & ~masks


def test_arrays_have_documented_shapes_dtypes_and_range(single, pair):
    assert single.images.shape == (2000, 1, 32, 32) and single.images.dtype == np.float32
    assert single.labels.shape == (2000,) and single.labels.dtype == np.int64
    assert single.masks.shape == (2000, 1, 32, 32) and single.masks.dtype == np.bool_
    assert pair.labels.shape == (1000, 2) and pair.labels.dtype == np.int64
    assert pair.masks.shape == (1000, 2, 32, 32)
    for data in (single, pair):
        assert data.images.min() >= 0.0 and data.images.max() <= 1.0
        assert data.classes == SUPPORTED_CLASSES and data.num_classes == 4
        assert set(np.unique(data.labels)) == {0, 1, 2, 3}
    assert len(single) == 2000 and len(pair) == 1000


def test_getitem_returns_image_and_label_like_a_tensor_dataset(single, pair):
    image, label = single[5]
    assert image.shape == (1, 32, 32) and image.dtype == np.float32
    assert np.array_equal(image, single.images[5])
    assert label.shape == () and label.dtype == np.int64 and label == single.labels[5]
    assert np.array_equal(single[-1][0], single.images[1999])
    images, labels = single[10:14]
    assert images.shape == (4, 1, 32, 32) and labels.tolist() == single.labels[10:14].tolist()
    image, label = pair[3]
    assert label.shape == (2,) and label.tolist() == pair.labels[3].tolist()
    with pytest.raises(IndexError, match="2000"):
        single[2000]


def test_same_arguments_give_bit_identical_arrays(pair):
    a, b = Shapes(300, size=40, seed=7), Shapes(300, size=40, seed=7)
    for name in ("images", "labels", "masks"):
        assert getattr(a, name).tobytes() == getattr(b, name).tobytes(), name
    again = Shapes(1000, objects=2, seed=0)
    assert again.images.tobytes() == pair.images.tobytes()
    assert np.array_equal(again.masks, pair.masks)


def test_different_seeds_give_different_data(single):
    other = Shapes(2000, seed=1)
    assert not np.array_equal(other.labels, single.labels)
    assert not np.array_equal(other.masks, single.masks)
    assert np.abs(other.images - single.images).mean() > 0.05


def test_labels_are_balanced(single, pair):
    assert np.bincount(single.labels).tolist() == [500, 500, 500, 500]
    odd = Shapes(10, classes=("circle", "square", "cross"), seed=3)
    assert sorted(np.bincount(odd.labels).tolist()) == [3, 3, 4]
    # 12 ordered pairs of distinct classes, each 83 or 84 times in 1000 images.
    pairs = np.unique(pair.labels, axis=0, return_counts=True)[1]
    assert len(pairs) == 12 and pairs.min() >= 83 and pairs.max() <= 84
    for slot in (0, 1):
        assert np.bincount(pair.labels[:, slot]).min() >= 245


def test_two_objects_always_have_different_classes(pair):
    assert (pair.labels[:, 0] != pair.labels[:, 1]).all()
    two = Shapes(50, classes=("triangle", "circle"), objects=2, seed=4)
    assert sorted(map(tuple, np.unique(two.labels, axis=0))) == [(0, 1), (1, 0)]


def test_every_object_is_whole_and_away_from_the_border(single, pair):
    for data in (single, pair):
        masks = data.masks
        assert masks.sum(axis=(2, 3)).min() >= 40  # no object vanishes or is cut down
        edges = masks[..., 0, :] | masks[..., -1, :] | masks[..., :, 0] | masks[..., :, -1]
        assert not edges.any()


def test_two_objects_never_overlap_and_keep_the_margin(pair):
    assert not (pair.masks[:, 0] & pair.masks[:, 1]).any()
    # Pixels of different objects are more than 3 sqrt(2) apart: no 4x4 cell holds both.
    closest = math.inf
    for first, second in pair.masks[:300]:
        a, b = np.argwhere(first), np.argwhere(second)
        closest = min(closest, np.sqrt(((a[:, None] - b[None]) ** 2).sum(-1)).min())
    assert closest > 3 * math.sqrt(2)
    cells = pair.masks.reshape(1000, 2, 8, 4, 8, 4).any(axis=(3, 5))
    assert not (cells[:, 0] & cells[:, 1]).any()


def test_objects_are_drawn_exactly_where_their_masks_are(single, pair):
    for data in (single, pair):
        images = np.broadcast_to(data.images, data.masks.shape)
        background = ~data.masks.any(axis=1)
        ring = _ring(data.masks) & background[:, None]
        for i in range(0, len(data), 7):
            for j in range(data.objects):
                inside = images[i, j][data.masks[i, j]]
                # A flat object plus noise, clearly brighter than the pixels just outside it:
                # a mask shifted by one pixel would take in background and fail both checks.
                assert inside.std() < 0.08
                assert inside.mean() - images[i, j][ring[i, j]].mean() > 0.3
                assert inside.mean() > images[i, 0][background[i]].mean() + 0.3


@pytest.mark.parametrize("classes", [SUPPORTED_CLASSES, ("cross", "triangle", "square", "circle")])
def test_each_label_draws_its_named_shape(classes):
    data = Shapes(400, classes=classes, seed=2)
    for k, name in enumerate(classes):
        boxes = [_bbox(m) for m in data.masks[data.labels == k, 0]]
        fill = np.mean([b.mean() for b in boxes])
        corners = np.mean([b[0, 0] | b[0, -1] | b[-1, 0] | b[-1, -1] for b in boxes])
        if name == "circle":
            assert 0.7 < fill < 0.88 and corners == 0
        elif name == "square":
            assert fill > 0.8
        elif name == "triangle":  # apex up: the lower half of its box holds more pixels
            assert fill < 0.62 and corners == 1
            halves = [(b[: len(b) // 2].sum(), b[-(len(b) // 2) :].sum()) for b in boxes]
            assert all(top < bottom for top, bottom in halves)
        else:  # a plus sign: centre filled, corners of its box empty
            assert fill < 0.65 and corners == 0
            assert all(b[len(b) // 2, b.shape[1] // 2] for b in boxes)


def test_brightness_does_not_give_the_class_away(single):
    # Every shape has the area of a disk of the drawn radius, and intensity is independent of
    # the class: mean object area and mean image brightness agree across classes.
    area = single.masks.sum(axis=(1, 2, 3))
    brightness = single.images.mean(axis=(1, 2, 3))
    per_class_area = [area[single.labels == k].mean() for k in range(4)]
    per_class_brightness = [brightness[single.labels == k].mean() for k in range(4)]
    assert max(per_class_area) / min(per_class_area) < 1.05
    assert max(per_class_brightness) - min(per_class_brightness) < 0.015
    assert brightness.std() > 0.03  # while brightness itself varies a lot between images


def test_scale_follows_image_size():
    for size in (16, 64):
        for objects in (1, 2):
            data = Shapes(200, size=size, objects=objects, seed=5)
            assert data.images.shape == (200, 1, size, size)
            assert data.masks.shape == (200, objects, size, size)
    small, large = Shapes(400, size=16).masks.sum(), Shapes(400, size=64).masks.sum()
    assert 14 < large / small < 18  # area grows with size squared


def test_empty_dataset_has_the_right_shapes():
    data = Shapes(0, objects=2)
    assert data.images.shape == (0, 1, 32, 32) and data.labels.shape == (0, 2)
    assert data.masks.shape == (0, 2, 32, 32) and len(data) == 0


def test_generates_ten_thousand_images():
    data = Shapes(10_000)
    assert data.images.shape == (10_000, 1, 32, 32)
    assert np.bincount(data.labels).tolist() == [2500] * 4


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"n": -1}, ValueError, "n must be >= 0, got -1"),
        ({"n": 2.5}, TypeError, "n must be an int, got 2.5"),
        ({"n": 4, "size": 8}, ValueError, "size must be >= 16 pixels, got 8"),
        ({"n": 4, "objects": 3}, ValueError, "objects must be 1 or 2, got 3"),
        ({"n": 4, "objects": 0}, ValueError, "objects must be 1 or 2, got 0"),
        ({"n": 4, "seed": -5}, ValueError, "seed must be >= 0, got -5"),
        ({"n": 4, "classes": ("circle",), "objects": 2}, ValueError, "at least 2 classes"),
        ({"n": 4, "classes": ()}, ValueError, "at least one class"),
        ({"n": 4, "classes": ("circle", "hexagon")}, ValueError, "'hexagon'"),
        ({"n": 4, "classes": ("circle", "circle")}, ValueError, "more than once"),
        ({"n": 4, "classes": "circle"}, TypeError, "sequence of names"),
    ],
)
def test_rejects_bad_arguments_naming_the_value(kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        Shapes(**kwargs)


def test_unknown_class_error_lists_the_supported_names():
    with pytest.raises(ValueError) as info:
        Shapes(4, classes=("star",))
    assert "circle, square, triangle, cross" in str(info.value)


def test_a_single_class_is_allowed_with_one_object():
    data = Shapes(20, classes=("cross",))
    assert data.num_classes == 1 and (data.labels == 0).all()
