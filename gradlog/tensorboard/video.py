"""``add_video``'s encoding: an animated GIF in a legacy ``Summary.Image``, which TensorBoard's
Images dashboard shows as an animation (PyTorch writes the same through moviepy; gradlog uses
Pillow, a runtime dependency already).

A batch of ``N`` clips is tiled into one clip, PyTorch's layout: ``N`` is padded with black
clips to a power of two, laid out in ``2 ** ((N.bit_length() - 1) // 2)`` rows. Pixels are
scaled as images are (uint8 kept, floats in ``[0, 1]`` times 255); an alpha channel is
dropped. A GIF frame holds at most 256 colours (Pillow picks them per frame); each frame lasts
``1000 / fps`` ms, a multiple of 10 ms (PyTorch's moviepy writes 0 ms delays).
"""

from __future__ import annotations

import io

import numpy as np
from tensorboard.compat.proto.summary_pb2 import Summary

from .image import to_uint8

__all__ = ["video_frames", "check_fps", "encode_gif", "frames_summary", "video_summary"]


def video_frames(vid_tensor: np.ndarray) -> np.ndarray:
    """``(N, T, C, H, W)`` clips as ``(T, H', W', C)`` uint8 frames of one tiled clip."""
    array = np.asarray(vid_tensor)
    if array.ndim != 5:
        raise ValueError(f"add_video: expected a (N, T, C, H, W) tensor, got shape "
                         f"{tuple(array.shape)}")
    n, t, c, h, w = array.shape
    if c not in (1, 3, 4):
        raise ValueError(f"add_video: frames need 1, 3 or 4 channels, got {c}")
    if c == 4:  # RGBA: a GIF has no alpha; PyTorch's writer drops it too
        array, c = array[:, :, :3], 3
    clips = to_uint8(array)
    padded = 1 << (n - 1).bit_length()
    if padded != n:
        clips = np.concatenate([clips, np.zeros((padded - n, t, c, h, w), np.uint8)])
    rows = 2 ** ((n.bit_length() - 1) // 2)
    cols = padded // rows
    grid = clips.reshape(rows, cols, t, c, h, w).transpose(2, 0, 4, 1, 5, 3)
    return np.ascontiguousarray(grid.reshape(t, rows * h, cols * w, c))


def check_fps(fps: float) -> None:
    if not fps > 0:
        raise ValueError(f"add_video: fps must be positive, got {fps}")


def encode_gif(frames: np.ndarray, fps: float) -> bytes:
    """An animated GIF of ``(T, H, W, 1 | 3)`` uint8 frames that loops forever."""
    from PIL import Image

    check_fps(fps)
    mode = "L" if frames.shape[3] == 1 else "RGB"
    images = [Image.fromarray(frame[:, :, 0] if mode == "L" else frame, mode)
              for frame in frames]
    buffer = io.BytesIO()
    images[0].save(buffer, format="GIF", save_all=True, append_images=images[1:],
                   duration=max(10, round(1000 / fps)), loop=0)
    return buffer.getvalue()


def frames_summary(tag: str, frames: np.ndarray, fps: float = 4) -> Summary:
    """One animated GIF of ``(T, H, W, C)`` uint8 frames (from :func:`video_frames`)."""
    _, height, width, channels = frames.shape
    image = Summary.Image(height=height, width=width, colorspace=channels,
                          encoded_image_string=encode_gif(frames, fps))
    return Summary(value=[Summary.Value(tag=tag, image=image)])


def video_summary(tag: str, vid_tensor, fps: float = 4) -> Summary:
    """One (tiled) animated GIF of ``(N, T, C, H, W)`` clips."""
    check_fps(fps)
    return frames_summary(tag, video_frames(vid_tensor), fps)
