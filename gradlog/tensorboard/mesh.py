"""``add_mesh``'s encoding, as PyTorch writes it: one float32 ``(B, N, 3)`` tensor per part
(vertices, faces, colors) under ``<tag>_VERTEX``, ``<tag>_FACE``, ``<tag>_COLOR``, each with the
mesh plugin's metadata (which parts exist, the shape, the three.js scene config as JSON).

The Mesh dashboard reads faces as int32 vertex indices and colors as uint8 RGB.
"""

from __future__ import annotations

import json

import numpy as np
from tensorboard.compat.proto.summary_pb2 import Summary

from .summary import float_tensor

__all__ = ["mesh_summary"]


def _checked(name: str, array) -> np.ndarray:
    array = np.asarray(array)
    if array.ndim != 3 or array.shape[2] != 3:
        raise ValueError(f"add_mesh: {name} should have shape (B, N, 3), got "
                         f"{tuple(array.shape)}")
    return array


def mesh_summary(tag: str, vertices, colors=None, faces=None, config_dict=None,
                 display_name: str | None = None, description: str | None = None) -> Summary:
    """The mesh (or point cloud, without ``faces``) ``tag``.

    Args:
        vertices: ``(B, N, 3)`` coordinates.
        colors: ``(B, N, 3)`` RGB per vertex, 0-255.
        faces: ``(B, F, 3)`` vertex indices of each triangle.
        config_dict: three.js settings, e.g. ``{"camera": {"cls": "PerspectiveCamera",
            "fov": 75}}``.
    """
    from tensorboard.plugins.mesh import metadata
    from tensorboard.plugins.mesh.plugin_data_pb2 import MeshPluginData

    parts = [(array, kind) for array, kind in ((vertices, MeshPluginData.VERTEX),
                                                (faces, MeshPluginData.FACE),
                                                (colors, MeshPluginData.COLOR))
             if array is not None]
    names = {MeshPluginData.VERTEX: "vertices", MeshPluginData.FACE: "faces",
             MeshPluginData.COLOR: "colors"}
    config = "{}" if config_dict is None else json.dumps(config_dict, sort_keys=True)
    components = metadata.get_components_bitmask([kind for _, kind in parts])
    values = []
    for array, kind in parts:
        array = _checked(names[kind], array)
        smd = metadata.create_summary_metadata(tag, display_name, kind, components,
                                               list(array.shape), description,
                                               json_config=config)
        values.append(Summary.Value(tag=metadata.get_instance_name(tag, kind), metadata=smd,
                                    tensor=float_tensor(array)))
    return Summary(value=values)
