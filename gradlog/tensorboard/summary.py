"""Pure summary builders: values in, ``Summary`` protos out (no files, no state).

Encodings follow ``torch.utils.tensorboard`` so every TensorBoard version and both loaders read
them: scalars as float32 ``simple_value`` (the Rust loader drops double, int64 and shape-[1]
scalar tensors), text through the text plugin under ``<tag>/text_summary``, PR curves as a
``[6, num_thresholds]`` float32 tensor, the custom-scalar layout as a string tensor. Histograms
(:mod:`.histogram`), images (:mod:`.image`) and hparams (:mod:`.hparams`) have their own modules.
"""

from __future__ import annotations

import threading

import numpy as np
from tensorboard.compat.proto import types_pb2
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import DATA_CLASS_SCALAR, Summary, SummaryMetadata
from tensorboard.compat.proto.tensor_pb2 import TensorProto
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto

__all__ = ["scalar", "text", "pr_curve", "pr_curve_raw", "custom_scalars", "scalar_event_bytes",
           "float_tensor"]

_MIN_COUNT = 1e-7  # PR curves: avoids 0/0, as TensorBoard's own pr_curve summary does


def float_tensor(array) -> TensorProto:
    """A float32 ``TensorProto`` (``tensor_content`` bytes: compact and fast to parse)."""
    array = np.asarray(array, dtype="<f4")  # (not ascontiguousarray: it makes 0-d arrays 1-d)
    shape = TensorShapeProto(dim=[TensorShapeProto.Dim(size=n) for n in array.shape])
    return TensorProto(dtype=types_pb2.DT_FLOAT, tensor_shape=shape,
                       tensor_content=array.tobytes())


def _string_tensor(data: bytes, shape: tuple[int, ...] = ()) -> TensorProto:
    dims = TensorShapeProto(dim=[TensorShapeProto.Dim(size=n) for n in shape])
    return TensorProto(dtype=types_pb2.DT_STRING, tensor_shape=dims, string_val=[data])


def scalar(tag: str, value: float, new_style: bool = False) -> Summary:
    """A scalar: ``simple_value``, or with ``new_style`` a rank-0 float32 tensor."""
    if not new_style:
        return Summary(value=[Summary.Value(tag=tag, simple_value=value)])
    metadata = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="scalars"),
                               data_class=DATA_CLASS_SCALAR)
    return Summary(value=[Summary.Value(tag=tag, metadata=metadata,
                                        tensor=float_tensor(np.float32(value)))])


_reusable = threading.local()


def scalar_event_bytes(tag: str, value: float, step: int, wall_time: float) -> bytes:
    """``Event(wall_time, step, summary=scalar(tag, value))`` serialized, ~4x faster.

    NOTE: each thread reuses one ``Event`` rather than building one per call. A call takes it
    and puts it back, so a call that interrupts another on the same thread (a signal handler
    that logs) finds none and builds its own.
    """
    reused = _reusable.__dict__.pop("event", None)
    if reused is None:
        event = Event(summary=Summary(value=[Summary.Value(simple_value=0.0)]))
        reused = (event, event.summary.value[0])
    event, summary_value = reused
    event.wall_time = wall_time
    event.step = step
    summary_value.tag = tag
    summary_value.simple_value = value
    data = event.SerializeToString()
    _reusable.event = reused
    return data


def text(tag: str, text_string: str) -> Summary:
    """Markdown text, shown (rendered) by the text dashboard under ``<tag>/text_summary``."""
    from tensorboard.plugins.text import metadata

    if not isinstance(text_string, str):
        raise TypeError(f"text_string must be a str, got {type(text_string).__name__}")
    tensor = _string_tensor(text_string.encode("utf-8"), shape=(1,))
    return Summary(value=[Summary.Value(tag=tag + "/text_summary", tensor=tensor,
                                        metadata=metadata.create_summary_metadata(None, None))])


def _checked_thresholds(num_thresholds) -> int:
    if int(num_thresholds) < 1:
        raise ValueError(f"num_thresholds must be at least 1, got {num_thresholds}")
    return min(int(num_thresholds), 127)  # PyTorch's cap


def pr_curve_raw(tag: str, true_positive_counts, false_positive_counts, true_negative_counts,
                 false_negative_counts, precision, recall, num_thresholds: int = 127
                 ) -> Summary:
    """A precision-recall curve from precomputed counts: six rows of one entry per threshold.

    As in PyTorch, the rows may be shorter than ``num_thresholds`` (TensorBoard draws the
    entries given); ``num_thresholds`` is capped at 127.
    """
    from tensorboard.plugins.pr_curve import metadata

    num_thresholds = _checked_thresholds(num_thresholds)
    rows = [np.asarray(x, dtype=np.float32).ravel() for x in (
        true_positive_counts, false_positive_counts, true_negative_counts,
        false_negative_counts, precision, recall)]
    if len({row.size for row in rows}) != 1:
        raise ValueError(f"pr_curve_raw: the six rows differ in length "
                         f"({', '.join(str(row.size) for row in rows)})")
    data = np.stack(rows)
    smd = metadata.create_summary_metadata(None, None, num_thresholds=num_thresholds)
    return Summary(value=[Summary.Value(tag=tag, metadata=smd, tensor=float_tensor(data))])


def pr_curve(tag: str, labels, predictions, num_thresholds: int = 127, weights=None) -> Summary:
    """A precision-recall curve at thresholds ``i / (num_thresholds - 1)``.

    ``labels`` are 0/1 (or bool), ``predictions`` probabilities in ``[0, 1]``; predictions
    outside that range (and NaN) are ignored, as in PyTorch.
    """
    num_thresholds = _checked_thresholds(num_thresholds)
    labels = np.asarray(labels, dtype=np.float64).ravel()
    predictions = np.asarray(predictions, dtype=np.float64).ravel()
    if labels.shape != predictions.shape:
        raise ValueError(f"labels and predictions differ in size ({labels.size} and "
                         f"{predictions.size})")
    weights = np.broadcast_to(np.asarray(1.0 if weights is None else weights, dtype=np.float64),
                              labels.shape).ravel()
    with np.errstate(invalid="ignore"):
        position = np.floor(predictions * (num_thresholds - 1))
        inside = (position >= 0) & (position <= num_thresholds - 1)
    bucket = position[inside].astype(np.intp)
    true_weight = (labels * weights)[inside]
    false_weight = ((1.0 - labels) * weights)[inside]
    tp = np.cumsum(np.bincount(bucket, true_weight, num_thresholds)[::-1])[::-1]
    fp = np.cumsum(np.bincount(bucket, false_weight, num_thresholds)[::-1])[::-1]
    tn, fn = fp[0] - fp, tp[0] - tp
    precision = tp / np.maximum(_MIN_COUNT, tp + fp)
    recall = tp / np.maximum(_MIN_COUNT, tp + fn)
    return pr_curve_raw(tag, tp, fp, tn, fn, precision, recall, num_thresholds)


def custom_scalars(layout: dict) -> Summary:
    """The custom-scalars dashboard's layout.

    Args:
        layout: ``{category: {chart title: ["Multiline", [tag regexes]] |
            ["Margin", [value_tag, lower_tag, upper_tag]]}}``, as in PyTorch.
    """
    from tensorboard.plugins.custom_scalar import layout_pb2, metadata

    categories = []
    for category, charts in layout.items():
        chart_protos = []
        for title, (kind, tags) in charts.items():
            if kind == "Margin":
                if len(tags) != 3:
                    raise ValueError(f"a Margin chart needs 3 tags (value, lower, upper), "
                                     f"got {len(tags)} for {title!r}")
                series = layout_pb2.MarginChartContent.Series(value=tags[0], lower=tags[1],
                                                              upper=tags[2])
                chart = layout_pb2.Chart(title=title,
                                         margin=layout_pb2.MarginChartContent(series=[series]))
            elif kind == "Multiline":
                chart = layout_pb2.Chart(title=title,
                                         multiline=layout_pb2.MultilineChartContent(tag=tags))
            else:
                raise ValueError(f"chart kind must be 'Multiline' or 'Margin', got {kind!r}")
            chart_protos.append(chart)
        categories.append(layout_pb2.Category(title=category, chart=chart_protos))
    proto = layout_pb2.Layout(category=categories)
    return Summary(value=[Summary.Value(tag=metadata.CONFIG_SUMMARY_TAG,
                                        metadata=metadata.create_summary_metadata(),
                                        tensor=_string_tensor(proto.SerializeToString()))])
