"""``SummaryWriter``: the API of ``torch.utils.tensorboard.SummaryWriter`` over gradlog's event
files. It owns the files, the step and the wall time; encoding is left to the pure builders.

Differences from PyTorch (all deliberate, listed in docs/differences.md): histograms never fail on
NaN/Inf (they are counted into ``<tag>/nonfinite``) and have no empty, zero-width or inverted
buckets; tags outside ``[A-Za-z0-9_./-]`` are cleaned with a warning; bool hparams are booleans;
``double_precision`` scalars are written as float32 (TensorBoard's default loader drops doubles);
bad input raises ``ValueError``/``TypeError`` where PyTorch raises ``AssertionError``; event files
are flushed at exit and on SIGINT/SIGTERM, and write errors are raised, naming the file;
``purge_step`` also hides the earlier sessions' steps in the ``add_scalars`` and ``add_hparams``
runs this writer creates (PyTorch's purge misses them); ``sync()`` and ``replay`` let a run
resumed from a checkpoint keep what was logged before the checkpoint at its step.

Threads: with ``background=True`` (the default) the caller's thread only checks the arguments and
copies the values; a :class:`~.worker.BackgroundWorker` computes histograms, encodes images and
videos, and writes, in the order of the calls; on an object store it also uploads the segments
that close (:mod:`gradlog.storage`). The other builders are cheap and run on the caller; only their
writing waits its turn.
"""

from __future__ import annotations

import os
import socket
import time
import warnings
import weakref
from datetime import datetime

import numpy as np
from tensorboard.compat.proto.summary_pb2 import HistogramProto, Summary

from .. import storage
from . import summary as _summary
from .convert import clean_tag, to_float, to_numpy
from .file_writer import FileWriter
from .histogram import check_arguments, counts_proto, histogram_proto, tensorflow_edges
from .worker import BackgroundWorker

__all__ = ["SummaryWriter", "computed_scalars"]


def computed_scalars(tags, function, arrays: tuple, caller: str = "add_scalars_from"
                     ) -> list[tuple[str, float]]:
    """``(tag, number)`` for each of the numbers ``function(*arrays)`` returns, one per tag
    (None logs nothing for its tag); ``caller`` names the API in the error for a wrong count."""
    values = tuple(function(*arrays))
    if len(values) != len(tags):
        raise ValueError(f"{caller}: the function returned {len(values)} values for "
                         f"{len(tags)} tags")
    return [(tag, to_float(value)) for tag, value in zip(tags, values) if value is not None]


def _computed_scalars(tags: tuple[str, ...], function, arrays: tuple) -> Summary | None:
    summary = Summary()
    for tag, value in computed_scalars(tags, function, arrays):
        summary.value.add(tag=tag, simple_value=value)
    return summary if summary.value else None


def _one(function):
    """``function``'s number as a sequence of one (``add_scalar_from`` through
    ``add_scalars_from``)."""
    return lambda *arrays: (function(*arrays),)


class SummaryWriter:
    """Writes TensorBoard event files into ``log_dir``, as ``torch.utils.tensorboard`` does.

    Its extensions to PyTorch's API are listed in :attr:`capabilities`, which callers that
    also take other writers ask (``"add_histograms" in getattr(writer, "capabilities", ())``)
    rather than checking the class.

    Args:
        log_dir: the run directory; default ``runs/<%b%d_%H-%M-%S>_<hostname><comment>``.
        comment: appended to the default ``log_dir`` (ignored when ``log_dir`` is given).
        purge_step: when resuming a run at step T, hide the earlier session's events at steps
            ``>= T`` (both TensorBoard loaders), in this directory and in every ``add_scalars``
            or ``add_hparams`` run this writer creates below it.
        max_queue: flush once this many events are pending (a crash loses fewer); with
            ``background``, also the most calls that wait for the background thread.
        flush_secs: flush pending events at least this often.
        filename_suffix: appended to event file names.
        replay: what :meth:`sync` returned when the checkpoint the run resumes from (at
            ``purge_step``) was taken: the events at steps ``>= purge_step`` that were on disk
            then are written again (byte for byte), so the purge hides only what came after.
        background: compute histograms, encode images and write on one background thread,
            in call order (the caller only copies the values); False does it all in the call.
        max_queue_bytes: with ``background``, the most bytes of copied values that wait; a call
            that would exceed this or ``max_queue`` waits (counted in :attr:`queue_waits`).

    Every ``add_*`` method takes ``global_step`` (``Event.step``; 0 when None) and ``walltime``
    (seconds since the epoch; default ``time.time()``). Values may be gradlog or PyTorch
    tensors, numpy arrays or Python numbers. A write error raises ``OSError`` naming the file
    (with ``background``, from the next call, ``flush()`` or ``close()``).
    """

    #: What this writer does beyond PyTorch's ``SummaryWriter``: one event for many histograms
    #: (:meth:`add_histograms`), histograms from counts computed elsewhere
    #: (:meth:`add_histogram_counts`), numbers computed on the writer's thread
    #: (:meth:`add_scalars_from`), and the count of waits for its full queue
    #: (:attr:`queue_waits`), and a prebuilt ``Summary`` into this run (:meth:`add_summary`).
    capabilities = frozenset({"add_histograms", "add_histogram_counts", "add_scalars_from",
                              "queue_waits", "add_summary"})

    def __init__(self, log_dir=None, comment: str = "", purge_step: int | None = None,
                 max_queue: int = 10, flush_secs: float = 120, filename_suffix: str = "", *,
                 replay: dict[str, int] | None = None, background: bool = True,
                 max_queue_bytes: int = 64 << 20) -> None:
        if replay and purge_step is None:
            raise ValueError("replay needs purge_step: the step of the checkpoint it was "
                             "recorded at")
        if not log_dir:
            stamp = datetime.now().strftime("%b%d_%H-%M-%S")
            log_dir = os.path.join("runs", f"{stamp}_{socket.gethostname()}{comment}")
        self.log_dir = os.fspath(log_dir)
        self.purge_step = purge_step
        self.max_queue = max_queue
        self.flush_secs = flush_secs
        self.filename_suffix = filename_suffix
        # As in PyTorch: the run's FileWriter, and every open one by directory (the run's and
        # add_scalars' extra runs); both None after close() until the next add_*.
        self.file_writer: FileWriter | None = None
        self.all_writers: dict[str, FileWriter] | None = None
        self.default_bins: list[float] = tensorflow_edges().tolist()
        self._projector = None
        self._nonfinite_tags: set[str] = set()
        self._sub_run_purge_step = purge_step  # for each add_scalars/add_hparams run created
        self._worker = None
        if background:
            self._worker = BackgroundWorker(max_queue, max_queue_bytes)
            weakref.finalize(self, self._worker.stop_when_done)  # dropped: let its thread end
        self._get_file_writer()
        if replay:
            self._replay(replay, int(purge_step))

    @property
    def queue_waits(self) -> int:
        """How many calls so far waited because the background queue was full (0 without
        ``background``)."""
        return 0 if self._worker is None else self._worker.waits

    @property
    def queue_wait_seconds(self) -> float:
        """How long those calls waited in total, in seconds."""
        return 0.0 if self._worker is None else self._worker.wait_seconds

    def _new_file_writer(self, log_dir, purge_step: int | None = None) -> FileWriter:
        return FileWriter(log_dir, self.max_queue, self.flush_secs, self.filename_suffix,
                          purge_step=purge_step, worker=self._worker)

    def _get_file_writer(self) -> FileWriter:
        # After close(), the next add_* starts a new file in the same directory, as in PyTorch.
        if self.all_writers is None or self.file_writer is None:
            self.file_writer = self._new_file_writer(self.log_dir, self.purge_step)
            self.all_writers = {self.file_writer.get_logdir(): self.file_writer}
            self.purge_step = None
        return self.file_writer

    def _sub_run_writer(self, run_dir: str) -> FileWriter:
        """The open writer of an ``add_scalars`` run (created on first use)."""
        writer = self.all_writers.get(run_dir)
        if writer is None:
            writer = self.all_writers[run_dir] = self._new_file_writer(
                run_dir, self._sub_run_purge_step)
        return writer

    def _replay(self, positions: dict[str, int], step: int) -> None:
        from .replay import events_to_replay

        base = self._get_file_writer().get_logdir()
        for run, payloads in events_to_replay(base, positions, step).items():
            writer = self._get_file_writer() if not run else \
                self._sub_run_writer(storage.join(base, *run.split("/")))
            for payload in payloads:
                writer.write(payload)

    def _copy(self, array: np.ndarray, source=None) -> np.ndarray:
        """``array`` as the caller's own copy when a background thread will read it later."""
        if self._worker is not None and (source is None
                                         or np.may_share_memory(array, source)):
            return np.array(array, copy=True)
        return array

    def _emit(self, summary: Summary, global_step, walltime, writer=None) -> None:
        (writer or self._get_file_writer()).add_summary(summary, global_step, walltime)

    def get_logdir(self) -> str:
        """The run directory."""
        return self.log_dir

    def add_scalar(self, tag: str, scalar_value, global_step=None, walltime=None,
                   new_style: bool = False, double_precision: bool = False) -> None:
        """Log one number (stored as float32; NaN and Inf are kept).

        ``new_style=True`` writes a rank-0 float32 tensor instead of ``simple_value``;
        ``double_precision=True`` does the same, with a warning: TensorBoard's default loader
        drops double scalars.
        """
        if new_style or double_precision:
            if double_precision:
                warnings.warn("double_precision scalars are written as float32: TensorBoard's "
                              "default loader drops double scalars", UserWarning, stacklevel=2)
            summary = _summary.scalar(clean_tag(tag), to_float(scalar_value), new_style=True)
            return self._emit(summary, global_step, walltime)
        payload = _summary.scalar_event_bytes(
            clean_tag(tag),
            scalar_value if type(scalar_value) is float else to_float(scalar_value),
            0 if global_step is None else int(global_step),
            time.time() if walltime is None else float(walltime))
        (self.file_writer or self._get_file_writer()).write(payload)

    def add_scalar_from(self, tag: str, function, values: tuple, global_step=None,
                        walltime=None) -> None:
        """Log the number ``function(*values)`` (None logs nothing), e.g. a norm of large
        arrays. With ``background`` the ``values`` (arrays or tensors) are copied now and
        ``function`` runs on the writer's thread, in call order; without, at once. As with
        every job of that thread, an exception it raises is raised by a later call."""
        self.add_scalars_from((tag,), _one(function), values, global_step, walltime)

    def add_scalars_from(self, tags, function, values: tuple, global_step=None,
                         walltime=None) -> None:
        """Log the numbers ``function(*values)`` returns, one per tag of ``tags`` (None logs
        nothing for its tag), as one event: one call for the writer's thread where one per
        tag would make a logging step wait for a full queue (the histogram plugin's update
        ratios of every parameter). Otherwise as :meth:`add_scalar_from`."""
        tags = tuple(clean_tag(t) for t in tags)
        if not tags:
            return
        arrays = tuple(self._copy(to_numpy(v)) for v in values)
        what = f"add_scalar_from({tags[0]!r})" if len(tags) == 1 else \
            f"add_scalars_from({tags[0]!r}, ... {len(tags)} tags)"
        self._get_file_writer().add_summary_later(
            _computed_scalars, (tags, function, arrays), global_step, walltime,
            sum(a.nbytes for a in arrays), what)

    def add_scalars(self, main_tag: str, tag_scalar_dict: dict, global_step=None,
                    walltime=None) -> None:
        """Log several numbers on one chart: each key is a run ``<log_dir>/<main_tag>_<key>``
        whose scalar is tagged ``main_tag`` (PyTorch's layout)."""
        walltime = time.time() if walltime is None else walltime
        main = clean_tag(main_tag)
        base = self._get_file_writer().get_logdir()
        for key, value in tag_scalar_dict.items():
            run_dir = storage.join(base, main.replace("/", "_") + "_" + clean_tag(key))
            self._emit(_summary.scalar(main, to_float(value)), global_step, walltime,
                       self._sub_run_writer(run_dir))

    def add_tensor(self, tag: str, tensor, global_step=None, walltime=None) -> None:
        """Log a whole tensor with its dtype and shape (no dashboard shows it; read it back
        with TensorBoard's loaders)."""
        from .tensor import tensor_summary

        self._emit(tensor_summary(clean_tag(tag), to_numpy(tensor)), global_step, walltime)

    def add_histogram(self, tag: str, values, global_step=None, bins="tensorflow",
                      walltime=None, max_bins: int | None = None, *,
                      also_tags: tuple[str, ...] = (), copy: bool = True) -> None:
        """Log the distribution of ``values`` (histogram and distribution dashboards).

        Args:
            bins: ``"tensorflow"`` (PyTorch's default exponential edges), a numpy estimator
                (``"auto"``, ``"fd"``, ...), a bin count, or increasing edges.
            max_bins: merge neighbouring buckets down to at most this many.
            also_tags: more tags that get the same histogram (computed once, written in the
                same event), e.g. two names for values known to be equal.
            copy: False hands ``values`` over to the writer: the caller made the array for
                this call and never changes it, so the background thread reads it without
                the copy taken otherwise (a copy is the training thread's main cost).

        Non-finite values are not bucketed but counted: from the first time a tag has any, the
        count is logged as the scalar ``<tag>/nonfinite`` (with a warning that first time,
        issued where the histogram is computed: with ``background``, on the writer's thread,
        by ``flush()`` at the latest).
        """
        self.add_histograms({tag: values}, global_step, bins, walltime, max_bins,
                            also_tags={tag: also_tags} if also_tags else None, copy=copy)

    def add_histograms(self, tag_values: dict, global_step=None, bins="tensorflow",
                       walltime=None, max_bins: int | None = None, *,
                       also_tags: dict | None = None, copy: bool = True) -> None:
        """Log several histograms at one step as one event (``{tag: values}``), e.g. every
        layer's weights: one record in the file and one call for the background thread, so
        a logging step that would queue a call per tensor waits less for the thread.

        ``also_tags`` maps a tag to more tags for the same histogram; ``bins``, ``max_bins``
        and ``copy`` apply to every tensor and mean what they do in :meth:`add_histogram`.
        """
        extra = also_tags or {}
        unknown = sorted(set(extra) - set(tag_values))
        if unknown:
            raise ValueError(f"add_histograms: also_tags names tags that are not logged: "
                             f"{unknown}")
        if not isinstance(bins, (str, int)):
            bins = np.array(bins, dtype=np.float64)  # the caller may change its list
        entries, nbytes = [], 0
        for tag, values in tag_values.items():
            array = to_numpy(values)
            check_arguments(array, bins, max_bins)
            if copy:
                array = self._copy(array)
            tags = (clean_tag(tag), *(clean_tag(t) for t in extra.get(tag, ())))
            entries.append((tags, array))
            nbytes += array.nbytes
        if not entries:
            return
        what = f"add_histogram({entries[0][0][0]!r})" if len(entries) == 1 else \
            f"add_histograms({entries[0][0][0]!r}, ... {len(entries)} tensors)"
        self._get_file_writer().add_summary_later(
            self._histograms_summary, (entries, bins, max_bins), global_step, walltime,
            nbytes, what)

    def add_histogram_counts(self, tags: list, counts, global_step=None,
                             walltime=None) -> None:
        """Log histograms computed elsewhere as one event: ``counts()`` returns one
        :class:`~gradlog.tensorboard.histogram.HistogramCounts` per entry of ``tags`` (a tuple
        of the tags that get that histogram). ``counts`` is called on the writer's thread
        with ``background`` (where an engine's device work is waited for), else at once.
        Buckets, min/max and non-finite counts are written as :meth:`add_histogram` writes
        them from the values."""
        entries = [tuple(clean_tag(t) for t in each) for each in tags]
        if not entries:
            return
        what = f"add_histogram_counts({entries[0][0]!r}, ... {len(entries)} tensors)"
        self._get_file_writer().add_summary_later(
            self._counted_summary, (entries, counts), global_step, walltime, 0, what)

    def _counted_summary(self, entries: list, counts) -> Summary:
        results = counts()
        return self._summary_of(
            (tags, counts_proto(c), c.nonfinite) for tags, c in zip(entries, results))

    def _histograms_summary(self, entries: list, bins, max_bins) -> Summary:
        return self._summary_of((tags, *histogram_proto(values, bins, max_bins))
                                for tags, values in entries)

    def _summary_of(self, protos) -> Summary:
        # (on the background thread, in call order: the tags' non-finite state is its own)
        summary = Summary()
        for tags, proto, nonfinite in protos:
            for tag in tags:
                if proto is not None:
                    summary.value.add(tag=tag, histo=proto)
                if nonfinite and tag not in self._nonfinite_tags:
                    self._nonfinite_tags.add(tag)
                    warnings.warn(f"add_histogram({tag!r}): {nonfinite} non-finite values left "
                                  f"out of the histogram; their count is logged as "
                                  f"{tag + '/nonfinite'!r}", RuntimeWarning, stacklevel=2)
                if tag in self._nonfinite_tags:
                    summary.value.add(tag=tag + "/nonfinite", simple_value=nonfinite)
        return summary

    def add_histogram_raw(self, tag: str, min, max, num, sum, sum_squares, bucket_limits,
                          bucket_counts, global_step=None, walltime=None) -> None:
        """Log a histogram computed elsewhere (``bucket_limits`` are right edges). Empty
        buckets at either end are dropped, as TensorBoard's Python loader does."""
        limits = to_numpy(bucket_limits).astype(float).ravel().tolist()
        counts = to_numpy(bucket_counts).astype(float).ravel().tolist()
        if len(limits) != len(counts):
            raise ValueError("len(bucket_limits) != len(bucket_counts)")
        nonzero = [i for i, count in enumerate(counts) if count]
        if nonzero:
            limits = limits[nonzero[0]:nonzero[-1] + 1]
            counts = counts[nonzero[0]:nonzero[-1] + 1]
        histo = HistogramProto(min=min, max=max, num=num, sum=sum, sum_squares=sum_squares,
                               bucket_limit=limits, bucket=counts)
        self._emit(Summary(value=[Summary.Value(tag=clean_tag(tag), histo=histo)]),
                   global_step, walltime)

    def add_image(self, tag: str, img_tensor, global_step=None, walltime=None,
                  dataformats: str = "CHW") -> None:
        """Log an image: ``CHW`` (default), ``HWC``, ``HW``...; floats in [0, 1] or uint8."""
        from .image import image_pixels, pixels_summary

        tag, array = clean_tag(tag), to_numpy(img_tensor)
        pixels = self._copy(image_pixels(array, dataformats), array)
        self._get_file_writer().add_summary_later(pixels_summary, (tag, pixels), global_step,
                                                  walltime, pixels.nbytes, f"add_image({tag!r})")

    def add_images(self, tag: str, img_tensor, global_step=None, walltime=None,
                   dataformats: str = "NCHW") -> None:
        """Log a batch of images as one grid (8 per row): ``NCHW`` (default) or ``NHWC``..."""
        self.add_image(tag, img_tensor, global_step, walltime, dataformats)

    def add_image_with_boxes(self, tag: str, img_tensor, box_tensor, global_step=None,
                             walltime=None, rescale: float = 1, dataformats: str = "CHW",
                             labels=None) -> None:
        """Log an image with red boxes ``box_tensor`` (N, 4) of ``[x1, y1, x2, y2]`` pixels,
        each with its string in ``labels``; the drawn image is scaled by ``rescale``."""
        from .boxes import image_with_boxes_summary

        summary = image_with_boxes_summary(clean_tag(tag), to_numpy(img_tensor),
                                           to_numpy(box_tensor), rescale, dataformats, labels)
        self._emit(summary, global_step, walltime)

    def add_figure(self, tag: str, figure, global_step=None, close: bool = True,
                   walltime=None) -> None:
        """Log a matplotlib figure (or a list of them, as a grid). Needs matplotlib."""
        from .image import figure_to_chw

        chw = figure_to_chw(figure, close)
        self.add_image(tag, chw, global_step, walltime,
                       dataformats="NCHW" if isinstance(figure, list) else "CHW")

    def add_video(self, tag: str, vid_tensor, global_step=None, fps: float = 4,
                  walltime=None) -> None:
        """Log ``(N, T, C, H, W)`` clips (C 1 or 3; uint8, or floats in [0, 1]) as one tiled
        animated GIF, shown by the Images dashboard."""
        from .video import check_fps, frames_summary, video_frames

        check_fps(fps)
        tag, array = clean_tag(tag), to_numpy(vid_tensor)
        frames = self._copy(video_frames(array), array)
        self._get_file_writer().add_summary_later(frames_summary, (tag, frames, fps),
                                                  global_step, walltime, frames.nbytes,
                                                  f"add_video({tag!r})")

    def add_audio(self, tag: str, snd_tensor, global_step=None, sample_rate: int = 44100,
                  walltime=None) -> None:
        """Log a mono clip, ``(L,)`` or ``(1, L)`` samples in [-1, 1], as a 16-bit WAV."""
        from .audio import audio_summary

        self._emit(audio_summary(clean_tag(tag), to_numpy(snd_tensor), sample_rate),
                   global_step, walltime)

    def add_text(self, tag: str, text_string: str, global_step=None, walltime=None) -> None:
        """Log Markdown text; it appears under ``<tag>/text_summary`` (as in PyTorch)."""
        self._emit(_summary.text(clean_tag(tag), text_string), global_step, walltime)

    def add_pr_curve(self, tag: str, labels, predictions, global_step=None,
                     num_thresholds: int = 127, weights=None, walltime=None) -> None:
        """Log a precision-recall curve of 0/1 ``labels`` against probabilities."""
        summary = _summary.pr_curve(clean_tag(tag), to_numpy(labels), to_numpy(predictions),
                                    num_thresholds, None if weights is None else to_numpy(weights))
        self._emit(summary, global_step, walltime)

    def add_pr_curve_raw(self, tag: str, true_positive_counts, false_positive_counts,
                         true_negative_counts, false_negative_counts, precision, recall,
                         global_step=None, num_thresholds: int = 127, weights=None,
                         walltime=None) -> None:
        """Log a precision-recall curve from counts computed elsewhere (``weights`` unused)."""
        rows = [to_numpy(x) for x in (true_positive_counts, false_positive_counts,
                                      true_negative_counts, false_negative_counts, precision,
                                      recall)]
        self._emit(_summary.pr_curve_raw(clean_tag(tag), *rows, num_thresholds=num_thresholds),
                   global_step, walltime)

    def add_custom_scalars(self, layout: dict) -> None:
        """Set the custom-scalars dashboard's layout (call once per writer):
        ``{category: {title: ["Multiline", [tag regexes]] | ["Margin", [value, lower, upper]]}}``.
        """
        self._emit(_summary.custom_scalars(layout), None, None)

    def add_custom_scalars_multilinechart(self, tags, category: str = "default",
                                          title: str = "untitled") -> None:
        """Shorthand for one multiline chart of ``tags``."""
        self.add_custom_scalars({category: {title: ["Multiline", list(tags)]}})

    def add_custom_scalars_marginchart(self, tags, category: str = "default",
                                       title: str = "untitled") -> None:
        """Shorthand for one margin chart of ``[value, lower, upper]`` tags."""
        self.add_custom_scalars({category: {title: ["Margin", list(tags)]}})

    def add_mesh(self, tag: str, vertices, colors=None, faces=None, config_dict=None,
                 global_step=None, walltime=None) -> None:
        """Log a 3D mesh or point cloud: ``(B, N, 3)`` vertices, optional ``(B, N, 3)`` RGB
        colors (0-255) and ``(B, F, 3)`` triangle vertex indices; ``config_dict`` holds
        three.js settings (camera, lights, material)."""
        from .mesh import mesh_summary

        arrays = [None if a is None else to_numpy(a) for a in (vertices, colors, faces)]
        self._emit(mesh_summary(clean_tag(tag), *arrays, config_dict), global_step, walltime)

    def add_graph(self, model, input_to_model=None, verbose: bool = False,
                  use_strict_trace: bool = True) -> None:
        """Log ``model``'s graph for the Graphs dashboard, from one forward pass (in eval mode)
        on ``input_to_model`` (a tensor or a tuple of them): layers by name, operations and
        shapes. The model's engine traces it: a PyTorch module by PyTorch
        (``use_strict_trace`` is its ``strict``); ``verbose`` prints the graph."""
        from .graph import graph

        self._get_file_writer().add_graph(graph(model, input_to_model, verbose,
                                                use_strict_trace))

    def add_onnx_graph(self, prototxt) -> None:
        """Log the graph of the ONNX model file ``prototxt`` (the path; read without the onnx
        package)."""
        from .onnx_graph import load_onnx_graph

        self._get_file_writer().add_onnx_graph(load_onnx_graph(prototxt))

    def add_hparams(self, hparam_dict: dict, metric_dict: dict, hparam_domain_discrete=None,
                    run_name: str | None = None, global_step=None) -> None:
        """Log one trial's hyperparameters and metrics for the hparams dashboard.

        As in PyTorch, the trial is its own run, ``<log_dir>/<run_name or time.time()>``,
        holding the experiment, the session start/end and one scalar per metric. bool values
        are booleans, str values strings, numbers real; ``hparam_domain_discrete`` gives
        ``{name: [all values]}``.
        """
        from .hparams import hparams_summaries

        summaries = hparams_summaries(hparam_dict, metric_dict, hparam_domain_discrete)
        run_dir = storage.join(self._get_file_writer().get_logdir(),
                               run_name or str(time.time()))
        trial = self._new_file_writer(run_dir, self._sub_run_purge_step)
        try:
            for summary in summaries:
                self._emit(summary, global_step, None, trial)
            for tag, value in metric_dict.items():
                self._emit(_summary.scalar(clean_tag(tag), to_float(value)), global_step, None,
                           trial)
        finally:
            trial.close()

    def add_summary(self, summary: Summary, global_step=None, walltime=None) -> None:
        """Write a prebuilt ``Summary`` into this run (as PyTorch's ``FileWriter.add_summary``
        does): e.g. the hparams session summaries of :mod:`.hparams`, for a trial that is this
        run itself rather than ``add_hparams``' sub-run."""
        if not isinstance(summary, Summary):
            raise TypeError(f"summary should be a tensorboard Summary, got "
                            f"{type(summary).__name__}")
        self._emit(summary, global_step, walltime)

    def add_embedding(self, mat, metadata=None, label_img=None, global_step=None,
                      tag: str = "default", metadata_header=None) -> None:
        """Log points for the embedding projector: ``mat`` (N, D), optional N labels
        (``metadata``, or rows with ``metadata_header``) and (N, C, H, W) ``label_img``."""
        from tensorboard.plugins.projector.projector_config_pb2 import ProjectorConfig

        from .projector import add_embedding

        if self._projector is None:
            self._projector = ProjectorConfig()
        add_embedding(self._get_file_writer().get_logdir(), self._projector, to_numpy(mat),
                      metadata, None if label_img is None else to_numpy(label_img), global_step,
                      tag, metadata_header)

    def flush(self) -> None:
        """Write every pending event to disk (with ``background``, after the queued calls)."""
        if self._worker is not None:
            self._worker.drain()
        for writer in list((self.all_writers or {}).values()):
            writer.flush()

    def sync(self, since_step: int | None = None) -> dict[str, int]:
        """Flush and fsync every open event file (on an object store: upload the open
        segments); returns how much of each is on disk, ``{file relative to log_dir, with
        "/": bytes}`` (of an object store's segments, those holding steps ``>= since_step``).
        Take it when a checkpoint is saved at ``since_step`` and pass it back as ``replay``
        when resuming from that checkpoint."""
        positions = {}
        for writer in list((self.all_writers or {}).values()):
            run = storage.relative(writer.get_logdir(), self.log_dir)
            for name, size in writer.sync(since_step).items():
                positions[f"{run}/{name}" if run else name] = size
        return positions

    def close(self) -> None:
        """Flush and close every file. Idempotent; a later ``add_*`` starts a new file."""
        writers, error = list((self.all_writers or {}).values()), None
        self.file_writer = self.all_writers = None
        if self._worker is not None:
            try:
                self._worker.stop()  # every queued call first; the thread ends
            except Exception as worker_error:  # noqa: BLE001 - raised after the files closed
                error = worker_error
        for writer in writers:
            try:
                writer.close()
            except OSError as close_error:
                error = error or close_error
        if error is not None:
            raise error

    def __enter__(self) -> SummaryWriter:
        return self

    def __exit__(self, exc_type, exc_val, exc_tb) -> None:
        self.close()

