"""Shapes: the built-in synthetic image dataset, drawn in memory so training needs no download.

Each image holds one (or two) filled shapes -- circle, square, triangle, cross -- at a random
position, scale, slight rotation and intensity, on a background with a random level, a faint
random gradient and Gaussian noise. Every object comes with its exact ground-truth mask, which is
what Grad-CAM is measured against (with ``objects=2`` the map for one class must land on that
object and not on the other one).

Two choices keep the task honest:

* every shape is scaled to the **same area** as a disk of the drawn radius, and intensity is
  drawn independently of the class, so image brightness says nothing about the class;
* objects are drawn with hard edges, so a mask covers exactly the pixels of its object.

Generation is vectorised per class (all objects of one class are rasterised at once on a
coordinate grid, and placement works on all images at once), so 10,000 images of 32x32 take a
fraction of a second.
"""

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

SUPPORTED_CLASSES = ("circle", "square", "triangle", "cross")
MIN_SIZE = 16

# Equal-area factors: a shape of scale r has the area of a disk of radius r (pi r^2).
_SQUARE_HALF_SIDE = math.sqrt(math.pi) / 2  # (2h)^2 = pi r^2
_TRIANGLE_RADIUS = math.sqrt(4 * math.pi / (3 * math.sqrt(3)))  # 3 sqrt(3) R^2 / 4 = pi r^2
_CROSS_ARM = math.sqrt(9 * math.pi / 20)  # arm L, bar half-width L/3: area 20 L^2 / 9
_CROSS_BAR = _CROSS_ARM / 3

# Scale (equal-area radius) as a fraction of the image size, the same with one or two objects
# so that a model trained on single shapes sees familiar sizes in two-object probes.
_SCALE_RANGE = (0.12, 0.20)
_MAX_TILT = math.radians(10)  # squares, triangles and crosses are tilted by at most this much
_INTENSITY_RANGE = (0.6, 1.0)
_BACKGROUND_LEVEL = (0.0, 0.15)
_GRADIENT_AMPLITUDE = (0.0, 0.15)
_NOISE_SIGMA = (0.02, 0.06)
_BORDER = 1.0  # pixels kept free between every shape and the image edge
_PAIR_TRIES = 16  # candidate positions per round for a pair of shapes
_MAX_PLACEMENT_ROUNDS = 1000


class Shapes:
    """Synthetic shapes with labels and ground-truth masks, identical for identical arguments.

    Args:
        n: number of images (0 is allowed).
        size: image height and width in pixels (at least 16); shape scale follows it.
        classes: names of the classes, a subset of ``circle, square, triangle, cross``; label
            ``k`` means ``classes[k]``.
        objects: 1, or 2 for two shapes of different classes per image, more than
            ``3 * sqrt(2) * size / 32`` pixels apart: at size 32, no 4x4 cell of a
            1/4-resolution map (such as a Grad-CAM map after two 2x poolings) holds pixels of
            both. Scales are drawn from the same range in both cases, so a model trained on
            single shapes meets familiar sizes in two-object images.
        seed: seed of the ``numpy.random.PCG64`` generator that draws everything.

    Attributes:
        images: ``(n, 1, size, size)`` float32 in [0, 1].
        labels: ``(n,)`` int64, or ``(n, 2)`` with ``objects=2`` (one class per object, in the
            order of ``masks``; the two always differ). Classes are balanced to within one.
        masks: ``(n, objects, size, size)`` bool, the exact pixels of each object; masks of one
            image never overlap and never touch the image border.
        classes: the class names, as a tuple.
        num_classes: ``len(classes)``.
    """

    def __init__(
        self,
        n: int,
        size: int = 32,
        classes: Sequence[str] = SUPPORTED_CLASSES,
        objects: int = 1,
        seed: int = 0,
    ) -> None:
        n, size, objects, seed = _check_ints(n, size, objects, seed)
        self.classes = _check_classes(classes, objects)
        self.num_classes = len(self.classes)
        self.size = size
        self.objects = objects
        self.seed = seed

        rng = np.random.Generator(np.random.PCG64(seed))
        kinds = _draw_labels(rng, n, self.num_classes, objects)
        scale, angle, centers = _place(rng, kinds, self.classes, size)
        intensity = rng.uniform(*_INTENSITY_RANGE, size=kinds.shape)
        self.masks = _rasterize(kinds, self.classes, scale, centers, angle, size)
        self.images = _compose(rng, self.masks, intensity)[:, None]
        self.labels = kinds[:, 0] if objects == 1 else kinds

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(
        self, index: int | slice | NDArray[np.integer]
    ) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
        """Return ``(image, label)`` as ``TensorDataset`` does: for an int, a (1, size, size)
        float32 view and an int64 scalar (a (2,) array with ``objects=2``); a slice or an index
        array gives the batch of both, so a loader can fetch a batch in one call."""
        return self.images[index], self.labels[index]

    def __repr__(self) -> str:
        return (
            f"Shapes(n={len(self)}, size={self.size}, classes={self.classes}, "
            f"objects={self.objects}, seed={self.seed})"
        )


def _check_ints(n: int, size: int, objects: int, seed: int) -> tuple[int, int, int, int]:
    values = {"n": n, "size": size, "objects": objects, "seed": seed}
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise TypeError(f"Shapes: {name} must be an int, got {value!r}")
    if n < 0:
        raise ValueError(f"Shapes: n must be >= 0, got {n}")
    if size < MIN_SIZE:
        raise ValueError(f"Shapes: size must be >= {MIN_SIZE} pixels, got {size}")
    if objects not in (1, 2):
        raise ValueError(f"Shapes: objects must be 1 or 2, got {objects}")
    if seed < 0:
        raise ValueError(f"Shapes: seed must be >= 0, got {seed}")
    return int(n), int(size), int(objects), int(seed)


def _check_classes(classes: Sequence[str], objects: int) -> tuple[str, ...]:
    if isinstance(classes, str):
        raise TypeError(f"Shapes: classes must be a sequence of names, got the string {classes!r}")
    names = tuple(classes)
    if not names:
        raise ValueError("Shapes: classes must name at least one class, got ()")
    unknown = [c for c in names if c not in SUPPORTED_CLASSES]
    if unknown:
        raise ValueError(
            f"Shapes: unknown class name(s) {unknown}; supported: {', '.join(SUPPORTED_CLASSES)}"
        )
    duplicates = sorted({c for c in names if names.count(c) > 1})
    if duplicates:
        raise ValueError(f"Shapes: class name(s) {duplicates} given more than once in {names}")
    if len(names) < objects:
        raise ValueError(
            f"Shapes: objects={objects} needs at least {objects} classes (each object has a "
            f"different class), got {len(names)}: {names}"
        )
    return names


def _draw_labels(rng: np.random.Generator, n: int, k: int, objects: int) -> NDArray[np.int64]:
    """Balanced labels, shuffled: (n, objects), distinct classes within an image."""
    if objects == 1:
        return rng.permutation(np.arange(n, dtype=np.int64) % k)[:, None]
    # Every ordered pair of distinct classes equally often, so each class is equally likely in
    # either slot and with every partner.
    first, second = np.nonzero(~np.eye(k, dtype=bool))
    pairs = np.stack([first, second], axis=1).astype(np.int64)
    return pairs[rng.permutation(np.arange(n) % len(pairs))]


def _place(
    rng: np.random.Generator, kinds: NDArray[np.int64], classes: tuple[str, ...], size: int
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """Draw scale and tilt (n, objects) and centres (n, objects, 2) such that every shape lies
    inside the image with a border and, with two objects, they are more than the margin apart.

    Each centre is uniform over the positions where the shape's exact bounding box fits; a pair
    is uniform over the positions that also keep the margin (the first of several independent
    tries that does). When no try does, scale and tilt are redrawn as well, since two large
    shapes may not fit side by side at all; each round redraws only the images still unplaced.
    """
    n, objects = kinds.shape
    scale, angle = np.empty(kinds.shape), np.empty(kinds.shape)
    centers = np.empty((n, objects, 2))
    todo = np.arange(n)
    for _ in range(_MAX_PLACEMENT_ROUNDS):
        shape = (len(todo), objects)
        scale[todo] = rng.uniform(_SCALE_RANGE[0] * size, _SCALE_RANGE[1] * size, size=shape)
        angle[todo] = rng.uniform(-_MAX_TILT, _MAX_TILT, size=shape)
        geometry = (kinds[todo], classes, scale[todo], angle[todo])
        low, high = _center_bounds(*geometry, size)
        if objects == 1:
            centers[todo] = rng.uniform(low, high)
            return scale, angle, centers
        tries = rng.uniform(low[:, None], high[:, None], size=(len(todo), _PAIR_TRIES, 2, 2))
        repeated = (np.repeat(a, _PAIR_TRIES, axis=0) for a in (geometry[0], *geometry[2:]))
        kinds_r, scale_r, angle_r = repeated
        ok = _separated(kinds_r, classes, scale_r, angle_r, tries.reshape(-1, 2, 2), size)
        ok = ok.reshape(len(todo), _PAIR_TRIES)
        found = ok.any(axis=1)
        centers[todo[found]] = tries[found, ok[found].argmax(axis=1)]
        todo = todo[~found]
        if len(todo) == 0:
            return scale, angle, centers
    raise AssertionError(f"placement did not converge: {len(todo)} images left")


def _center_bounds(
    kinds: NDArray[np.int64],
    classes: tuple[str, ...],
    scale: NDArray[np.float64],
    angle: NDArray[np.float64],
    size: int,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Lowest and highest (x, y) centre, (m, objects, 2), that keep each shape's exact bounding
    box (its extents towards +x, +y, -x, -y) at least the border away from the image edge."""
    right, down, left, up = (
        _support(kinds, classes, scale, angle, d * math.pi / 2) for d in range(4)
    )
    low = np.stack([left, up], axis=-1) + _BORDER
    high = size - _BORDER - np.stack([right, down], axis=-1)
    return low, high


def _separated(
    kinds: NDArray[np.int64],
    classes: tuple[str, ...],
    scale: NDArray[np.float64],
    angle: NDArray[np.float64],
    centers: NDArray[np.float64],
    size: int,
) -> NDArray[np.bool_]:
    """Whether the two shapes of each image are certainly more than the margin apart.

    For unit d from centre 1 to centre 2, every point a of shape 1 and b of shape 2 satisfy
    |b - a| >= <b - a, d> >= |c2 - c1| - h1(d) - h2(-d), with h the support function (extent
    along a direction); a lower bound that is tight for convex shapes facing each other.
    """
    offset = centers[:, 1] - centers[:, 0]
    distance = np.hypot(offset[:, 0], offset[:, 1])
    towards = np.arctan2(offset[:, 1], offset[:, 0])[:, None] + np.array([0.0, math.pi])
    reach = _support(kinds, classes, scale, angle, towards).sum(axis=1)
    return distance - reach > _margin(size)


def _support(
    kinds: NDArray[np.int64],
    classes: tuple[str, ...],
    scale: NDArray[np.float64],
    angle: NDArray[np.float64],
    direction: float | NDArray[np.float64],
) -> NDArray[np.float64]:
    """Extent of each shape from its centre along the image direction ``direction`` (radians,
    y pointing down): max <p - centre, (cos, sin)> over the shape's points p."""
    phi = np.broadcast_to(direction - angle, kinds.shape)  # the direction in the shape's frame
    out = np.empty(kinds.shape)
    for k, name in enumerate(classes):
        hit = kinds == k
        out[hit] = scale[hit] * _unit_support(name, np.cos(phi[hit]), np.sin(phi[hit]))
    return out


def _unit_support(name: str, c: NDArray, s: NDArray) -> NDArray:
    """Support function of the unit-scale shape along (c, s); convex hull vertices for cross."""
    if name == "circle":
        return np.ones_like(c)
    if name == "square":
        return _SQUARE_HALF_SIDE * (np.abs(c) + np.abs(s))
    if name == "triangle":  # vertices (0, -R) and (+-R sqrt(3)/2, R/2)
        half = math.sqrt(3) / 2
        return _TRIANGLE_RADIUS * np.maximum.reduce([-s, half * c + s / 2, s / 2 - half * c])
    if name == "cross":  # hull vertices (+-L, +-t) and (+-t, +-L)
        ac, as_ = np.abs(c), np.abs(s)
        return np.maximum(_CROSS_ARM * ac + _CROSS_BAR * as_, _CROSS_BAR * ac + _CROSS_ARM * as_)
    raise AssertionError(f"no geometry for class {name!r}")


def _margin(size: int) -> float:
    """Minimum distance between the pixels of two objects, proportional to the image like the
    shapes. At size 32 a cell of a 1/4-resolution map covers 4x4 pixels whose centres are at most
    3 sqrt(2) apart, so the wider gap means no such cell holds pixels of both objects."""
    return 3 * math.sqrt(2) * size / 32


def _rasterize(
    kinds: NDArray[np.int64],
    classes: tuple[str, ...],
    scale: NDArray[np.float64],
    centers: NDArray[np.float64],
    angle: NDArray[np.float64],
    size: int,
) -> NDArray[np.bool_]:
    """Masks (n, objects, size, size), one class at a time over every object of that class."""
    masks = np.zeros((*kinds.shape, size, size), dtype=bool)
    grid = np.arange(size, dtype=np.float32) + 0.5  # pixel centres
    for k, name in enumerate(classes):
        rows, slots = np.nonzero(kinds == k)
        if len(rows) == 0:
            continue
        cx, cy = (centers[rows, slots, i].astype(np.float32)[:, None, None] for i in (0, 1))
        theta = angle[rows, slots]
        cos = np.cos(theta).astype(np.float32)[:, None, None]
        sin = np.sin(theta).astype(np.float32)[:, None, None]
        dx, dy = grid[None, None, :] - cx, grid[None, :, None] - cy
        # Coordinates in the shape's own frame (rotated back by its tilt).
        u, v = cos * dx + sin * dy, cos * dy - sin * dx
        r = scale[rows, slots].astype(np.float32)[:, None, None]
        masks[rows, slots] = _inside(name, u, v, r)
    return masks


def _inside(name: str, u: NDArray, v: NDArray, r: NDArray) -> NDArray[np.bool_]:
    """Which points (u, v) of the shape's frame (v pointing down) lie inside the shape."""
    if name == "circle":
        return u * u + v * v <= r * r
    if name == "square":
        return np.maximum(np.abs(u), np.abs(v)) <= _SQUARE_HALF_SIDE * r
    if name == "triangle":
        # Equilateral, apex up, centred on its centroid: inside all three edges, each at
        # distance R/2 from the centre along its outward normal.
        half = 0.5 * _TRIANGLE_RADIUS * r
        s = math.sqrt(3) / 2
        return (v <= half) & (-s * u - 0.5 * v <= half) & (s * u - 0.5 * v <= half)
    if name == "cross":
        au, av = np.abs(u), np.abs(v)
        arm, bar = _CROSS_ARM * r, _CROSS_BAR * r
        return ((au <= arm) & (av <= bar)) | ((au <= bar) & (av <= arm))
    raise AssertionError(f"no rasteriser for class {name!r}")


def _compose(
    rng: np.random.Generator, masks: NDArray[np.bool_], intensity: NDArray[np.float64]
) -> NDArray[np.float32]:
    """Images (n, size, size): background, flat objects exactly on their masks, noise, clip."""
    n, objects, size, _ = masks.shape
    images = _background(rng, n, size)
    for j in range(objects):
        level = intensity[:, j].astype(np.float32)[:, None, None]
        np.copyto(images, level, where=masks[:, j])
    sigma = rng.uniform(*_NOISE_SIGMA, size=n).astype(np.float32)[:, None, None]
    noise = rng.standard_normal((n, size, size), dtype=np.float32)
    images += np.multiply(noise, sigma, out=noise)
    return np.clip(images, 0.0, 1.0, out=images)


def _background(rng: np.random.Generator, n: int, size: int) -> NDArray[np.float32]:
    """A random level plus a faint linear gradient in a random direction, per image: the
    level rises by the amplitude from one corner to the opposite one."""
    level = rng.uniform(*_BACKGROUND_LEVEL, size=n)
    amplitude = rng.uniform(*_GRADIENT_AMPLITUDE, size=n)
    direction = rng.uniform(0.0, 2 * math.pi, size=n)
    # ramp = cos * x + sin * y over centred coordinates lies in [-1/sqrt(2), 1/sqrt(2)]; map it
    # to [0, amplitude]. Summing a row term and a column term makes one full-size pass.
    grid = (np.arange(size) + 0.5) / size - 0.5
    slope = amplitude / math.sqrt(2)
    offset = (level + 0.5 * amplitude)[:, None, None]
    along_x = offset + (slope * np.cos(direction))[:, None, None] * grid[None, None, :]
    along_y = (slope * np.sin(direction))[:, None, None] * grid[None, :, None]
    return np.add(along_x.astype(np.float32), along_y.astype(np.float32))
