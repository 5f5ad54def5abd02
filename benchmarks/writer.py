"""Side-by-side benchmark of gradlog's SummaryWriter (W5 scalars, W5b histogram, image).

Contenders, run interleaved (A B A B ...) after one warm-up round each:

* ``gradlog``       gradlog.tensorboard.SummaryWriter
* ``tensorboardX``  tensorboardX.SummaryWriter (when installed)
* ``torch``         torch.utils.tensorboard.SummaryWriter (when installed)
* ``bare``          the floor: tensorboard's protos, google-crc32c framing, one 1 MiB buffered
                    file (scalars); a bare ``np.histogram(values, bins=30)`` (histogram)

Workloads and targets:

* scalars: 100,000 ``add_scalar`` calls then ``close()``; throughput >= 10x tensorboardX's and
  >= 0.5x the bare writer's.
* histogram: ``add_histogram`` of 1,000,000 float32 values with default bins, then ``flush()``;
  time <= 0.6x tensorboardX's and <= 1.2x the bare ``np.histogram(values, bins=30)``.
* image: ``add_image`` of a 3x256x256 float image, then ``flush()``; time <= tensorboardX's.

Usage: ``python benchmarks/writer.py [--quick] [--json PATH]``. ``--quick`` runs tiny sizes
once and only checks that every contender wrote what it was given (used by the test suite).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import struct
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


# ---------------------------------------------------------------- contenders


class BareWriter:
    """The floor for scalars: a new Event per scalar, framed with google-crc32c, one file."""

    def __init__(self, log_dir: str) -> None:
        import google_crc32c
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        self._event, self._summary, self._crc = Event, Summary, google_crc32c.value
        os.makedirs(log_dir, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time()):010d}.bare.{os.getpid()}"
        self._file = open(os.path.join(log_dir, name), "wb", buffering=1 << 20)
        self._write(Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())

    def _masked(self, data: bytes) -> bytes:
        crc = self._crc(data)
        return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)

    def _write(self, payload: bytes) -> None:
        header = struct.pack("<Q", len(payload))
        self._file.write(header + self._masked(header) + payload + self._masked(payload))

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        summary = self._summary(value=[self._summary.Value(tag=tag, simple_value=value)])
        self._write(self._event(wall_time=time.time(), step=step,
                                summary=summary).SerializeToString())

    def close(self) -> None:
        self._file.close()


def _writer_factories() -> dict:
    from gradlog.tensorboard import SummaryWriter

    factories = {"gradlog": SummaryWriter}
    try:
        from tensorboardX import SummaryWriter as XWriter

        factories["tensorboardX"] = XWriter
    except ImportError:
        pass
    try:
        from torch.utils.tensorboard import SummaryWriter as TorchWriter

        factories["torch"] = TorchWriter
    except ImportError:
        pass
    return factories


# ---------------------------------------------------------------- harness


def _interleaved(contenders: dict, repeats: int) -> dict[str, list[float]]:
    """Seconds per run for each contender: one warm-up each, then A B A B ..."""
    for run in contenders.values():
        run()
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, run in contenders.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return times


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _read_scalars(log_dir: str) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    found: dict[str, list[tuple[int, float]]] = {}
    for name in sorted(os.listdir(log_dir)):
        if "tfevents" not in name:
            continue
        for event in EventFileLoader(os.path.join(log_dir, name)).Load():
            for value in event.summary.value:
                if value.HasField("tensor") and value.metadata.plugin_data.plugin_name in (
                        "scalars", ""):
                    number = float(np.frombuffer(value.tensor.tensor_content, "<f4")[0]
                                   if value.tensor.tensor_content else value.tensor.float_val[0])
                    found.setdefault(value.tag, []).append((event.step, number))
    return found


# ---------------------------------------------------------------- workloads


def bench_scalars(tmp: str, count: int, repeats: int, check: bool) -> dict:
    factories = _writer_factories()
    factories["bare"] = BareWriter
    counter = iter(range(1 << 30))
    last_dir: dict[str, str] = {}

    def make(name, factory):
        def run():
            if name in last_dir:
                shutil.rmtree(last_dir[name], ignore_errors=True)
            log_dir = last_dir[name] = os.path.join(tmp, f"scalars-{name}-{next(counter)}")
            writer = factory(log_dir)
            add = writer.add_scalar
            for step in range(count):
                add("train/loss", step * 0.001, step)
            writer.close()
        return run

    times = _interleaved({name: make(name, f) for name, f in factories.items()}, repeats)
    if check:  # every contender wrote every point of its last run
        for name, log_dir in last_dir.items():
            points = _read_scalars(log_dir).get("train/loss", [])
            assert len(points) == count, (name, len(points))
            assert points[-1][0] == count - 1, (name, points[-1])
            assert abs(points[-1][1] - (count - 1) * 0.001) < 1e-3, (name, points[-1])
    result = {"count": count, "seconds": {n: _median(t) for n, t in times.items()}}
    result["events_per_sec"] = {n: count / s for n, s in result["seconds"].items()}
    return result


def bench_histogram(tmp: str, size: int, repeats: int, check: bool) -> dict:
    values = np.random.default_rng(0).standard_normal(size).astype(np.float32)
    writers = {name: factory(os.path.join(tmp, f"hist-{name}"))
               for name, factory in _writer_factories().items()}
    runs = {}
    for name, writer in writers.items():
        def run(writer=writer):
            writer.add_histogram("weights", values, 0)
            writer.flush()
        runs[name] = run
    runs["np.histogram(30)"] = lambda: np.histogram(values, bins=30)
    times = _interleaved(runs, repeats)
    for writer in writers.values():
        writer.close()
    if check:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        accumulator = EventAccumulator(os.path.join(tmp, "hist-gradlog"))
        accumulator.Reload()
        for event in accumulator.Histograms("weights"):
            histo = event.histogram_value
            assert sum(histo.bucket) == size and histo.min == values.min(), histo.min
    return {"size": size, "seconds": {n: _median(t) for n, t in times.items()}}


def bench_image(tmp: str, side: int, repeats: int, check: bool) -> dict:
    image = np.random.default_rng(0).random((3, side, side)).astype(np.float32)
    writers = {name: factory(os.path.join(tmp, f"image-{name}"))
               for name, factory in _writer_factories().items()}
    runs = {}
    for name, writer in writers.items():
        def run(writer=writer):
            writer.add_image("sample", image, 0)
            writer.flush()
        runs[name] = run
    times = _interleaved(runs, repeats)
    for writer in writers.values():
        writer.close()
    if check:
        import io

        from PIL import Image
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        accumulator = EventAccumulator(os.path.join(tmp, "image-gradlog"))
        accumulator.Reload()
        png = accumulator.Images("sample")[0].encoded_image_string
        pixels = np.asarray(Image.open(io.BytesIO(png)))
        expected = (image.transpose(1, 2, 0) * 255).clip(0, 255).astype(np.uint8)
        assert np.array_equal(pixels, expected)
    return {"side": side, "seconds": {n: _median(t) for n, t in times.items()}}


# ---------------------------------------------------------------- report


def _targets(results: dict) -> list[tuple[str, float, str, float]]:
    """(description, measured ratio, comparison, bound) for each target we can evaluate."""
    out = []
    rate = results["scalars"]["events_per_sec"]
    if "tensorboardX" in rate:
        out.append(("scalars: gradlog / tensorboardX throughput",
                    rate["gradlog"] / rate["tensorboardX"], ">=", 10.0))
    out.append(("scalars: gradlog / bare-writer throughput", rate["gradlog"] / rate["bare"],
                ">=", 0.5))
    hist = results["histogram"]["seconds"]
    if "tensorboardX" in hist:
        out.append(("histogram: gradlog / tensorboardX time",
                    hist["gradlog"] / hist["tensorboardX"], "<=", 0.6))
    out.append(("histogram: gradlog / np.histogram(x, 30) time",
                hist["gradlog"] / hist["np.histogram(30)"], "<=", 1.2))
    image = results["image"]["seconds"]
    if "tensorboardX" in image:
        out.append(("image: gradlog / tensorboardX time", image["gradlog"] / image["tensorboardX"],
                    "<=", 1.0))
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes, one repetition, correctness checks only")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    if args.quick:
        sizes = {"scalars": (2_000, 1), "histogram": (100_000, 1), "image": (64, 1)}
    else:
        sizes = {"scalars": (100_000, 5), "histogram": (1_000_000, 31), "image": (256, 21)}
    tmp = tempfile.mkdtemp(prefix="gradlog-bench-")
    try:
        results = {
            "scalars": bench_scalars(tmp, *sizes["scalars"], check=True),
            "histogram": bench_histogram(tmp, *sizes["histogram"], check=True),
            "image": bench_image(tmp, *sizes["image"], check=True),
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"W5 scalars: {results['scalars']['count']} add_scalar + close (median)")
    for name, rate in results["scalars"]["events_per_sec"].items():
        print(f"  {name:18s} {results['scalars']['seconds'][name]:8.3f} s  {rate:12,.0f} events/s")
    print(f"W5b histogram: {results['histogram']['size']} float32, default bins (median)")
    for name, seconds in results["histogram"]["seconds"].items():
        print(f"  {name:18s} {seconds * 1e3:8.2f} ms")
    side = results["image"]["side"]
    print(f"image: 3x{side}x{side} float (median)")
    for name, seconds in results["image"]["seconds"].items():
        print(f"  {name:18s} {seconds * 1e3:8.2f} ms")
    results["targets"] = []
    print("targets" + (" (--quick: sizes too small for the ratios to mean much)"
                       if args.quick else ""))
    for label, ratio, op, bound in _targets(results):
        met = ratio >= bound if op == ">=" else ratio <= bound
        results["targets"].append({"target": label, "ratio": ratio, "bound": f"{op} {bound}",
                                   "met": met})
        print(f"  {label:48s} {ratio:7.2f}  ({op} {bound})  {'ok' if met else 'MISSED'}")
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=2)
    return results


if __name__ == "__main__":
    main()
