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
coordinate grid), so 10,000 images of 32x32 take a fraction of a second.
"""

import math
import operator
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

# Radius of each shape's circumscribed circle, per unit of scale: placement keeps this circle
# inside the image (so no shape is ever cut off) and, with two objects, apart from the other's.
_CIRCUMRADIUS = {
    "circle": 1.0,
    "square": _SQUARE_HALF_SIDE * math.sqrt(2),
    "triangle": _TRIANGLE_RADIUS,
    "cross": math.hypot(_CROSS_ARM, _CROSS_BAR),
}

# Scale (equal-area radius) as a fraction of the image size: 4.5-8 px at size 32 for one object,
# 3.2-5.1 px for two, which must fit side by side with a margin.
_SCALE_RANGE = {1: (0.14, 0.25), 2: (0.10, 0.16)}
_MAX_TILT = math.radians(15)  # squares, triangles and crosses are tilted by at most this much
_INTENSITY_RANGE = (0.55, 1.0)
_BACKGROUND_LEVEL = (0.0, 0.15)
_GRADIENT_AMPLITUDE = (0.0, 0.15)
_NOISE_SIGMA = (0.03, 0.08)
_BORDER = 1.0  # pixels kept free around every shape's circumscribed circle
_MAX_PLACEMENT_ROUNDS = 1000


class Shapes:
    """Synthetic shapes with labels and ground-truth masks, identical for identical arguments.

    Args:
        n: number of images (0 is allowed).
        size: image height and width in pixels (at least 16); shape scale follows it.
        classes: names of the classes, a subset of ``circle, square, triangle, cross``; label
            ``k`` means ``classes[k]``.
        objects: 1, or 2 for two shapes of different classes per image, separated by a margin
            wider than a cell of a 1/4-resolution map (no such cell touches both objects).
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
        scale, centers = _place(rng, kinds, self.classes, size, objects)
        angle = rng.uniform(-_MAX_TILT, _MAX_TILT, size=kinds.shape)
        intensity = rng.uniform(*_INTENSITY_RANGE, size=kinds.shape)
        self.masks = _rasterize(kinds, self.classes, scale, centers, angle, size)
        self.images = _compose(rng, self.masks, intensity)[:, None]
        self.labels = kinds[:, 0] if objects == 1 else kinds

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
        """Return ``(image, label)``: a (1, size, size) float32 view and an int64 scalar (or a
        (2,) array with ``objects=2``), like a ``TensorDataset`` item."""
        i = operator.index(index)
        n = len(self.images)
        if not -n <= i < n:
            raise IndexError(f"index {i} is out of range for Shapes of length {n}")
        return self.images[i], self.labels[i]

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
    rng: np.random.Generator,
    kinds: NDArray[np.int64],
    classes: tuple[str, ...],
    size: int,
    objects: int,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Draw scales (n, objects) and centres (n, objects, 2) so every shape fits in the image
    and, with two objects, the circumscribed circles are at least the margin apart.

    Rows that violate the margin are redrawn (scale included, since two large shapes may not
    fit side by side at all) until none is left; each round redraws only the failing rows.
    """
    factor = np.array([_CIRCUMRADIUS[c] for c in classes])[kinds]
    low, high = _SCALE_RANGE[objects]
    scale = np.empty(kinds.shape)
    centers = np.empty((*kinds.shape, 2))
    margin = _margin(size)
    todo = np.arange(len(kinds))
    for _ in range(_MAX_PLACEMENT_ROUNDS):
        if len(todo) == 0:
            return scale, centers
        scale[todo] = rng.uniform(low * size, high * size, size=(len(todo), objects))
        reach = (factor[todo] * scale[todo] + _BORDER)[..., None]
        centers[todo] = rng.uniform(reach, size - reach, size=(len(todo), objects, 2))
        if objects == 1:
            todo = todo[:0]
            continue
        gap = np.linalg.norm(centers[todo, 0] - centers[todo, 1], axis=-1)
        needed = (factor[todo] * scale[todo]).sum(axis=1) + margin
        todo = todo[gap < needed]
    raise AssertionError(f"placement did not converge: {len(todo)} images left")


def _margin(size: int) -> float:
    """Minimum distance between two objects' pixels: more than the diagonal of a cell of a
    1/4-resolution map (``size / 8`` pixels wide), so no such cell sees both objects."""
    return math.sqrt(2) * size / 8


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
