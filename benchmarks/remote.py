"""W5r remote-scalars: ``add_scalar`` throughput to an object store (``s3://`` on a local
S3-compatible server) against a local path, side by side in one run.

Contenders, run interleaved (A B B A ...) after one warm-up round each; every round is a new
``SummaryWriter`` in a new run directory, ``N`` ``add_scalar`` calls, then ``close()``:

* ``local``  a local directory (one appended event file)
* ``s3``     ``s3://bench/<n>`` on moto's server mode on 127.0.0.1 (the server the tests use),
             through s3fs: segments spooled locally and uploaded whole when they close
             (``flush_secs``, size, ``close()``)

The time includes creating the writer (the first segment is uploaded at once) and closing it
(the last upload), so it is what a short run pays; a long run pays one upload per segment.
Printed: each contender's median and best events/s and the ratio s3 / local.

Usage: ``python benchmarks/remote.py [--quick] [--json PATH]`` (needs ``gradlog[remote]``
and ``moto[server]``). ``--quick`` runs tiny sizes once and checks that each contender wrote
every event (used by the test suite); timings are never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _path in (ROOT, os.path.join(ROOT, "tests", "remote")):  # the tests' moto server helper
    if _path not in sys.path:
        sys.path.insert(0, _path)


def _contenders(scratch: str) -> dict:
    from gradlog.tensorboard import SummaryWriter

    counter = iter(range(10**9))

    def run(make_dir, n: int) -> str:
        log_dir = make_dir(next(counter))
        writer = SummaryWriter(log_dir)
        for step in range(n):
            writer.add_scalar("loss", 1.0 / (step + 1), step)
        writer.close()
        return log_dir

    return {"local": lambda n: run(lambda i: os.path.join(scratch, "local", str(i)), n),
            "s3": lambda n: run(lambda i: f"s3://bench/{i}", n)}


def _count_events(log_dir: str, scratch: str) -> int:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from gradlog.tensorboard import storage
    local = log_dir
    if storage.is_url(log_dir):
        local = tempfile.mkdtemp(dir=scratch)
        storage.download_event_files(log_dir, local)
    acc = EventAccumulator(local, size_guidance={"scalars": 0})
    acc.Reload()
    return len(acc.Scalars("loss"))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, correctness only")
    parser.add_argument("--events", type=int, default=20_000, help="add_scalar calls a round")
    parser.add_argument("--blocks", type=int, default=6, help="interleaved rounds each")
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args(argv)
    n, blocks = (200, 1) if args.quick else (args.events, args.blocks)

    from moto_server import MotoServer
    scratch = tempfile.mkdtemp(prefix="gradlog-bench-remote-")
    server = MotoServer(os.path.join(scratch, "moto.log"))
    saved = {key: os.environ.get(key) for key in [*server.env, "XDG_CACHE_HOME"]}
    os.environ.update(server.env, XDG_CACHE_HOME=os.path.join(scratch, "cache"))
    try:
        server.client().create_bucket(Bucket="bench")
        contenders = _contenders(scratch)
        seconds: dict[str, list[float]] = {name: [] for name in contenders}
        written: dict[str, int] = {}
        for name, run in contenders.items():  # warm-up: imports, the s3fs session
            written[name] = _count_events(run(n), scratch)
        for block in range(blocks):
            names = list(contenders) if block % 2 == 0 else list(contenders)[::-1]
            for name in names:
                start = time.perf_counter()
                contenders[name](n)
                seconds[name].append(time.perf_counter() - start)
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(scratch, ignore_errors=True)
    for name, count in written.items():
        if count != n:
            raise SystemExit(f"{name}: {count} of {n} scalars read back")
    rates = {name: {"median": n / statistics.median(s), "best": n / min(s)}
             for name, s in seconds.items()}
    ratio = rates["s3"]["median"] / rates["local"]["median"]
    print(f"\n== W5r remote-scalars: add_scalar throughput, {n} calls + close() per round, "
          f"{blocks} rounds")
    for name, rate in rates.items():
        print(f"  {name:6s} median {rate['median']:10,.0f} events/s   best "
              f"{rate['best']:10,.0f} events/s")
    print(f"  s3 / local (medians): {ratio:.2f}x")
    results = {"events": n, "blocks": blocks, "events_per_sec": rates,
               "s3_over_local": ratio, "read_back": written}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    main()
