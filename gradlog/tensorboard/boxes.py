"""``add_image_with_boxes``'s encoding: the image with red ``[x1, y1, x2, y2]`` boxes (and a
label above each box's lower edge) drawn by Pillow as PyTorch draws them, then optionally
rescaled (Lanczos), as one PNG ``Summary.Image``."""

from __future__ import annotations

import math
import warnings

import numpy as np
from tensorboard.compat.proto.summary_pb2 import Summary

from .image import encode_png, to_hwc, to_uint8

__all__ = ["draw_boxes", "image_with_boxes_summary"]

_COLOR = "Red"
_WIDTH = 2


def _checked_labels(labels, count: int):
    if labels is None:
        return None
    labels = [labels] if isinstance(labels, str) else list(labels)
    if len(labels) != count:  # PyTorch drops them silently
        warnings.warn(f"add_image_with_boxes: {len(labels)} labels for {count} boxes; the "
                      f"labels are not drawn", UserWarning, stacklevel=4)
        return None
    return [str(label) for label in labels]


def draw_boxes(image, boxes: np.ndarray, labels=None):
    """Draw ``boxes`` (N, 4) and their ``labels`` on a Pillow image, in place."""
    from PIL import ImageDraw, ImageFont

    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default() if labels else None
    for index, (left, top, right, bottom) in enumerate(boxes.tolist()):
        draw.line([(left, top), (left, bottom), (right, bottom), (right, top), (left, top)],
                  width=_WIDTH, fill=_COLOR)
        if not labels or not labels[index]:
            continue
        x0, y0, x1, y1 = font.getbbox(labels[index])
        width, height = x1 - x0, y1 - y0
        margin = math.ceil(0.05 * height)
        draw.rectangle([(left, bottom - height - 2 * margin), (left + width, bottom)],
                       fill=_COLOR)
        draw.text((left + margin, bottom - height - margin), labels[index], fill="black",
                  font=font)
    return image


def image_with_boxes_summary(tag: str, img_tensor, box_tensor, rescale: float = 1,
                             dataformats: str = "CHW", labels=None) -> Summary:
    """An image with boxes.

    Args:
        img_tensor: the image, in ``dataformats`` (``CHW``, ``HWC``, ``HW``, ...).
        box_tensor: ``(N, 4)`` boxes, ``[x1, y1, x2, y2]`` in pixels of the image.
        rescale: scale the drawn image by this factor.
        labels: one string per box (or one string for one box).
    """
    from PIL import Image

    boxes = np.asarray(box_tensor, dtype=np.float64)
    if boxes.ndim != 2 or boxes.shape[1] != 4:
        raise ValueError(f"add_image_with_boxes: box_tensor should have shape (N, 4), got "
                         f"{tuple(boxes.shape)}")
    if rescale <= 0:
        raise ValueError(f"add_image_with_boxes: rescale must be positive, got {rescale}")
    hwc = to_uint8(to_hwc(np.asarray(img_tensor), dataformats))
    image = draw_boxes(Image.fromarray(hwc), boxes, _checked_labels(labels, len(boxes)))
    height, width = hwc.shape[:2]
    size = (int(width * rescale), int(height * rescale))
    if size != (width, height):
        image = image.resize(size, Image.Resampling.LANCZOS)
    pixels = np.asarray(image)
    encoded = Summary.Image(height=pixels.shape[0], width=pixels.shape[1],
                            colorspace=pixels.shape[2], encoded_image_string=encode_png(pixels))
    return Summary(value=[Summary.Value(tag=tag, image=encoded)])
