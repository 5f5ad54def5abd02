"""Event files, checkpoints and the CLI at fsspec URLs, on fsspec's in-memory filesystem:
segment naming and ordering (on memory:// through :class:`Segments` itself), the single
appended file of an appendable filesystem, the resume seam, bounded retries, the spool."""

from __future__ import annotations

import itertools
import os
import uuid
from pathlib import Path

import pytest

fsspec = pytest.importorskip("fsspec")

from click.testing import CliRunner  # noqa: E402
from remote_helpers import events_of, scalar_series  # noqa: E402
from tensorboard.compat.proto.event_pb2 import Event  # noqa: E402
from tensorboard.compat.proto.summary_pb2 import Summary  # noqa: E402

from gradlog.cli import main  # noqa: E402
from gradlog.tensorboard import SummaryWriter, storage  # noqa: E402
from gradlog.tensorboard.reader import check_file  # noqa: E402
from gradlog.tensorboard.record import frame  # noqa: E402
from gradlog.train import runs  # noqa: E402


@pytest.fixture
def memory_url():
    url = f"memory://gradlog-tests/{uuid.uuid4().hex}/run"
    yield url
    fs = fsspec.filesystem("memory")
    if fs.exists(url[len("memory://"):].rsplit("/", 1)[0]):  # a test may write nothing
        fs.rm(url[len("memory://"):].rsplit("/", 1)[0], recursive=True)


def _copy_out(url: str, target) -> list[str]:
    """The files below ``url`` copied to ``target`` (TensorBoard's loaders read local files
    here); their names relative to ``url``."""
    fs, root = storage.filesystem(url)
    rels = []
    for path in sorted(fs.find(root)):
        rel = path[len(root):].lstrip("/")
        local = target / rel
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(fs.cat_file(path))
        rels.append(rel)
    return rels


def test_urls_join_and_relate_with_slashes_and_file_urls_are_paths(tmp_path):
    assert storage.join("s3://b/exp", "run1", "hparams", ".") == "s3://b/exp/run1/hparams"
    assert storage.relative("s3://b/exp/run1/pair_a", "s3://b/exp/run1/") == "pair_a"
    assert storage.relative("s3://b/exp", "s3://b/exp") == ""
    assert not storage.is_url(f"file://{tmp_path}") and storage.is_url("gs://b/x")
    assert storage.local_path(f"file://{tmp_path}") == str(tmp_path)
    assert storage.same_location("s3://b/x/", "s3://b/x")
    with pytest.raises(ValueError, match="is not inside"):
        storage.relative("s3://b/other", "s3://b/exp")


def test_spool_mirrors_the_url_under_the_cache_directory(spool_home):
    assert storage.spool_dir("s3://bucket/exp/run1") == str(
        spool_home / "gradlog" / "spool" / "s3" / "bucket" / "exp" / "run1")
    assert ".." not in storage.spool_dir("s3://bucket/../../etc")


def test_a_missing_backend_says_what_to_install_and_an_unknown_protocol_is_named():
    try:
        import adlfs  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match=r"az://c/run: .*adlfs.*gradlog\[remote\]"):
            storage.filesystem("az://c/run")
    with pytest.raises(storage.UnknownProtocol, match="unknown URL scheme 'nosuchprotocol://'; "
                                                     "the installed fsspec protocols are: "):
        storage.filesystem("nosuchprotocol://b/run")


def test_an_appendable_filesystem_keeps_one_file_appended_at_each_flush(memory_url, tmp_path):
    writer = SummaryWriter(memory_url, max_queue=5)
    for step in range(12):
        writer.add_scalar("loss", 1.0 / (step + 1), step)
        if step == 6:
            writer.flush()
    writer.close()
    (name,) = _copy_out(memory_url, tmp_path)
    assert name.startswith("events.out.tfevents.")
    assert [s for s, _ in scalar_series(str(tmp_path), "loss")] == list(range(12))


def _segments(url, spool, max_age=60.0, max_bytes=storage.SEGMENT_BYTES):
    # Segments is given its naming and its header by the writer: here, names in increasing
    # order and a version record, as the writer's
    names = (f"events.out.tfevents.{1_000_000_000 + i:010d}.test" for i in itertools.count())
    return storage.Segments(url, lambda: next(names), _header, max_age, max_bytes,
                            spool=str(spool))


def _header() -> bytes:
    return frame(Event(wall_time=1.0e9, file_version="brain.Event:2").SerializeToString())


def _record(step: int, value: float) -> bytes:
    event = Event(step=step, wall_time=1.0e9 + step,
                  summary=Summary(value=[Summary.Value(tag="x", simple_value=value)]))
    return frame(event.SerializeToString())


def test_segments_are_complete_event_files_named_in_writing_order(memory_url, tmp_path):
    segments = _segments(memory_url, tmp_path / "spool", max_bytes=600)
    segments.append(_header())
    for step in range(40):
        segments.append(_record(step, float(step)))  # ~50 bytes each: a segment per ~12
        segments.upload_ready()
    segments.close()
    segments.upload_ready()
    names = _copy_out(memory_url, tmp_path / "out")
    assert len(names) >= 3 and names == sorted(names)
    steps = []
    for name in names:  # each one alone is a whole event file that starts with its version
        path = str(tmp_path / "out" / name)
        assert check_file(path).torn_bytes == 0 and check_file(path).damage is None
        events = events_of(path)
        assert events[0].file_version == "brain.Event:2"
        steps += [e.step for e in events[1:]]
    assert steps == list(range(40))  # in order, each once, across the segments
    assert not os.listdir(tmp_path / "spool")  # uploaded segments leave the spool
    assert [s for s, _ in scalar_series(str(tmp_path / "out"), "x")] == list(range(40))


def test_a_segment_closes_when_it_is_max_age_seconds_old(memory_url, tmp_path):
    segments = _segments(memory_url, tmp_path / "spool", max_age=30.0)
    assert segments.due() is None  # nothing open
    segments.append(_header())
    opened = segments.due() - 30.0
    segments.append(_record(0, 1.0))
    assert segments.due() == pytest.approx(opened + 30.0)  # the age counts from the opening
    segments.close_segment()
    assert segments.due() == 0.0 and segments.upload_due  # waiting for its upload
    segments.upload_ready()
    assert segments.due() is None and not segments.upload_due


def test_positions_name_the_segments_holding_a_step_or_later(memory_url, tmp_path):
    segments = _segments(memory_url, tmp_path / "spool")
    segments.append(_header())
    for step in range(5):
        segments.append(_record(step, 0.0))
    segments.close_segment()
    segments.append(_record(5, 0.0))
    segments.close_segment()
    segments.upload_ready()
    first, second = sorted(segments.positions())
    assert set(segments.positions(since_step=5)) == {second}
    assert set(segments.positions(since_step=4)) == {first, second}
    assert segments.positions(since_step=6) == {}


def test_retries_are_bounded_and_permanent_errors_are_not_retried():
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("connection refused")
        return "ok"

    assert storage.with_retries(flaky, "s3://b/x", delays=(0, 0, 0)) == "ok" and len(calls) == 3
    calls.clear()

    def down():
        calls.append(1)
        raise TimeoutError("timed out")

    with pytest.raises(storage.UploadError, match=r"upload failed 4 times .*TimeoutError") as e:
        storage.with_retries(down, "s3://b/x", delays=(0, 0, 0))
    assert len(calls) == 4 and e.value.filename == "s3://b/x"
    calls.clear()

    def missing():
        calls.append(1)
        raise FileNotFoundError("no such bucket")

    with pytest.raises(FileNotFoundError):
        storage.with_retries(missing, "s3://b/x", delays=(0, 0, 0))
    assert len(calls) == 1


def test_the_spool_is_uploaded_oldest_first_and_emptied(memory_url, spool_home):
    spool = Path(storage.spool_dir(memory_url))
    (spool / "pair_a").mkdir(parents=True)
    for rel in ("events.out.tfevents.0000000002.h.1.000001", "pair_a/events.out.tfevents.3",
                "events.out.tfevents.0000000001.h.1.000000"):
        (spool / rel).write_bytes(rel.encode())
    uploaded = storage.upload_spool(str(spool), memory_url)
    assert uploaded == [f"{memory_url}/events.out.tfevents.0000000001.h.1.000000",
                        f"{memory_url}/events.out.tfevents.0000000002.h.1.000001",
                        f"{memory_url}/pair_a/events.out.tfevents.3"]
    assert not spool.exists()
    assert storage.read_bytes(f"{memory_url}/pair_a/events.out.tfevents.3") == \
        b"pair_a/events.out.tfevents.3"


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file()}


@pytest.mark.parametrize("case", ["run directory", "elsewhere", "another url", "stray file"])
def test_sync_refuses_what_is_not_the_urls_spool_and_touches_nothing(memory_url, spool_home,
                                                                     tmp_path, case):
    """gradlog sync removes what it uploads: a run directory, or any tree that is not the
    spool of the URL, would be deleted; it is refused first, with one line."""
    url = memory_url
    if case == "run directory":  # the local run itself, as a user might mistake it
        given = tmp_path / "run"
        given.mkdir()
        (given / "run.toml").write_text("[run]\n")
        (given / "checkpoint-00000004.npz").write_bytes(b"state")
        (given / "events.out.tfevents.1.h.1.0").write_bytes(b"events")
    elif case == "elsewhere":
        given = tmp_path / "spool"
        given.mkdir()
        (given / "events.out.tfevents.1.h.1.0").write_bytes(b"events")
    else:
        given = Path(storage.spool_dir(memory_url))
        given.mkdir(parents=True)
        (given / "events.out.tfevents.1.h.1.0").write_bytes(b"events")
        if case == "another url":
            url = memory_url + "-other"
        else:
            (given / "notes.txt").write_text("mine")
    before = _tree(given)
    result = CliRunner().invoke(main, ["sync", str(given), url])
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.output
    says = "which is not an event file" if case == "stray file" else \
        f"is not the spool of {url} (that is {storage.spool_dir(url)}"
    assert result.stderr.startswith(f"error: {given} ") and says in result.stderr
    assert result.stderr.endswith("nothing was touched\n")
    assert _tree(given) == before
    assert not storage.exists(url)


def test_sync_takes_the_spool_under_another_cache_directory(memory_url, spool_home, tmp_path):
    moved = tmp_path / "elsewhere" / os.path.relpath(storage.spool_dir(memory_url), spool_home)
    moved.mkdir(parents=True)
    (moved / "events.out.tfevents.1.h.1.0").write_bytes(b"events")
    result = CliRunner().invoke(main, ["sync", str(moved), memory_url])
    assert result.exit_code == 0, result.output
    assert storage.read_bytes(f"{memory_url}/events.out.tfevents.1.h.1.0") == b"events"
    assert not moved.exists()


def test_resume_seam_replays_the_checkpoint_step_from_a_url(memory_url, tmp_path):
    writer = SummaryWriter(memory_url)
    for step in range(6):
        writer.add_scalar("loss", float(step), step)
    writer.add_scalar("val", 7.0, 5)  # logged at the checkpoint's step, before it
    writer.add_scalars("pair", {"a": 1.0}, 5)
    positions = writer.sync(since_step=5)
    writer.add_scalar("loss", 99.0, 6)  # after the checkpoint: to be hidden
    writer.close()
    resumed = SummaryWriter(memory_url, purge_step=5, replay=positions)
    for step in range(6, 8):  # the steps after the checkpoint's, again
        resumed.add_scalar("loss", float(step), step)
    resumed.close()
    _copy_out(memory_url, tmp_path)
    assert scalar_series(str(tmp_path), "loss") == [(s, float(s)) for s in range(8)]
    assert scalar_series(str(tmp_path), "val") == [(5, 7.0)]
    assert scalar_series(str(tmp_path / "pair_a"), "pair") == [(5, 1.0)]


def test_checkpoints_and_run_toml_at_a_url_and_the_resume_point(memory_url):
    from gradlog.train.checkpoints import find_resume_point
    from gradlog.train.errors import UserError
    with pytest.raises(UserError, match="no such directory"):
        find_resume_point(memory_url)
    for step in (4, 8, 12):
        runs.save_checkpoint(memory_url, {"step": step, "epoch": step // 4, "config": {}})
    assert [s for s, _ in runs.checkpoints(memory_url)] == [8, 12]  # the newest two kept
    assert runs.load_checkpoint(runs.newest_checkpoint(memory_url))["step"] == 12
    assert not any(n.endswith(".tmp") for n in runs.names(memory_url))
    runs.write_run_toml(memory_url, "x = 1\n")
    assert runs.read_text(f"{memory_url}/run.toml") == "x = 1\n"


def test_a_damaged_checkpoint_at_a_url_is_named(memory_url):
    storage.publish_bytes(f"{memory_url}/checkpoint-00000004.npz", b"PK\x03\x04 not a zip")
    with pytest.raises(ValueError, match=f"{memory_url}/checkpoint-00000004.npz"):
        runs.load_checkpoint(f"{memory_url}/checkpoint-00000004.npz")


def test_inspect_reads_a_url(memory_url):
    with SummaryWriter(memory_url) as writer:
        for step in range(3):
            writer.add_scalar("train/loss", 0.5 * step, step)
    result = CliRunner().invoke(main, ["inspect", memory_url.rsplit("/", 1)[0]])
    assert result.exit_code == 0, result.output
    assert "run run  (1 event file, 1 tags)" in result.output
    assert "loss  scalar  3  steps 0..2  last 1" in result.output
    missing = CliRunner().invoke(main, ["inspect", memory_url + "-none"])
    assert missing.exit_code == 2 and "no event files at" in missing.output


def test_the_largest_step_of_a_segment_is_read_as_the_protos_say(tmp_path):
    import numpy as np
    from tensorboard.compat.proto.event_pb2 import Event

    from gradlog.tensorboard.reader import read_records
    from gradlog.tensorboard.storage import _largest_step
    with SummaryWriter(str(tmp_path), purge_step=3) as writer:
        for step in (0, 5, 2**40 + 3, 127, 128, 300):
            writer.add_scalar("a", 1.0, step, walltime=0 if step == 5 else None)
            writer.add_histogram("h", np.arange(10.0), step)
            writer.add_text("t", "x", step)
    (name,) = [n for n in os.listdir(tmp_path) if "tfevents" in n]
    path = str(tmp_path / name)
    assert _largest_step(path) == max(Event.FromString(p).step for p in read_records(path))
    assert _largest_step(path) == 2**40 + 3


def test_gl_watch_logs_to_a_url(memory_url, tmp_path):
    import gradlog as gl
    from gradlog import nn, optim
    gl.manual_seed(0)
    model = nn.Linear(3, 2)
    opt = optim.SGD(model.parameters(), lr=0.1)
    with gl.watch(model, opt, logdir=memory_url) as run:
        for _ in range(3):
            opt.zero_grad()
            loss = model(gl.randn(4, 3)).pow(2).mean()
            loss.backward()
            opt.step()
            run.log_scalar("loss", loss)
    _copy_out(memory_url, tmp_path)
    assert [s for s, _ in scalar_series(str(tmp_path), "loss")] == [0, 1, 2]
