"""Embedding-projector files, laid out as PyTorch's ``add_embedding`` writes them.

The projector reads no events: it reads ``projector_config.pbtxt`` in the run directory, which
points at ``<step:05d>/<tag>/tensors.tsv`` (one row of tab-separated floats per point), an
optional ``metadata.tsv`` (one label per line, or a header row and tab-separated columns) and an
optional ``sprite.png`` (the points' images tiled in a square). The config lists every embedding
the writer logged, so it is rewritten on each call; every file is published whole
(:func:`gradlog.storage.publish`: a temporary file and a rename, or an upload and a move), so a
reader never sees half of one.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from .. import storage
from .image import encode_png, make_grid, to_uint8

__all__ = ["add_embedding"]

CONFIG_NAME = "projector_config.pbtxt"


def _escape(tag: str) -> str:
    # PyTorch's escaping, so a tag never adds directory levels.
    return tag.replace("%", "%25").replace("/", "%2f").replace("\\", "%5c")


def _metadata_tsv(metadata, header) -> bytes:
    if header is None:
        lines = [str(label) for label in metadata]
    else:
        if any(len(row) != len(header) for row in metadata):
            raise ValueError("every metadata row needs one value per metadata_header column")
        lines = ["\t".join(str(x) for x in row) for row in [header, *metadata]]
    return ("\n".join(lines) + "\n").encode("utf-8")


def _sprite_png(label_img: np.ndarray) -> bytes:
    count = label_img.shape[0]
    side = math.ceil(math.sqrt(count))
    grid = make_grid(label_img, ncols=side)  # (C, rows*H, side*W); pad to a square of tiles
    height = label_img.shape[2] * side
    square = np.zeros((grid.shape[0], height, grid.shape[2]), dtype=grid.dtype)
    square[:, :grid.shape[1]] = grid
    return encode_png(to_uint8(square.transpose(1, 2, 0)))


def add_embedding(log_dir: str, config, mat: np.ndarray, metadata=None, label_img=None,
                  global_step: int | None = None, tag: str = "default",
                  metadata_header=None) -> None:
    """Write one embedding's files and rewrite the run's projector config.

    Args:
        log_dir: the run directory.
        config: the writer's ``ProjectorConfig``; the new embedding is appended to it.
        mat: (N, D) array, one row per point.
        metadata: N labels, or N rows when ``metadata_header`` names the columns.
        label_img: (N, C, H, W) images of the points, shown as sprites.
        global_step: names the subdirectory (default 0).
        tag: the embedding's name.
    """
    from google.protobuf import text_format

    mat = np.asarray(mat)
    if mat.ndim != 2:
        raise ValueError(f"mat should be 2-D (points x features), got shape {mat.shape}")
    if metadata is not None and len(metadata) != mat.shape[0]:
        raise ValueError(f"{len(metadata)} metadata rows for {mat.shape[0]} points")
    if label_img is not None:
        label_img = np.asarray(label_img)
        if label_img.ndim != 4 or label_img.shape[0] != mat.shape[0]:
            raise ValueError(f"label_img should be (N, C, H, W) with N={mat.shape[0]}, "
                             f"got shape {label_img.shape}")
    step = 0 if global_step is None else int(global_step)
    subdir = f"{str(step).zfill(5)}/{_escape(tag)}"
    save_path = storage.join(log_dir, *subdir.split("/"))
    if storage.isdir(save_path):
        warnings.warn(f"embedding directory {save_path} exists; did you set global_step?",
                      UserWarning, stacklevel=3)
    storage.makedirs(save_path)
    rows = ["\t".join(repr(x) for x in row) for row in mat.astype(np.float64).tolist()]
    storage.publish(storage.join(save_path, "tensors.tsv"),
                    ("\n".join(rows) + "\n").encode("ascii"))
    info = config.embeddings.add(tensor_name=f"{tag}:{str(step).zfill(5)}",
                                 tensor_path=f"{subdir}/tensors.tsv")
    if metadata is not None:
        storage.publish(storage.join(save_path, "metadata.tsv"),
                        _metadata_tsv(metadata, metadata_header))
        info.metadata_path = f"{subdir}/metadata.tsv"
    if label_img is not None:
        storage.publish(storage.join(save_path, "sprite.png"), _sprite_png(label_img))
        info.sprite.image_path = f"{subdir}/sprite.png"
        info.sprite.single_image_dim.extend([label_img.shape[3], label_img.shape[2]])
    storage.publish(storage.join(log_dir, CONFIG_NAME),
                    text_format.MessageToString(config).encode())
