"""The writer's resume seam: ``sync()`` (flush + fsync, and how far each file is on disk),
``SummaryWriter(purge_step=T, replay=positions)`` (the earlier session's events at steps >= T
that were on disk at the checkpoint are written again; everything after is hidden, in the run
and in every add_scalars / add_hparams run), the record reader that replay and ``gradlog
inspect`` use, and the switch that lets a program own SIGINT/SIGTERM."""

from __future__ import annotations

import gc
import os
import signal
import types

import numpy as np
import pytest
from tb_helpers import TensorBoardServer, event_files
from tensorboard.backend.event_processing import event_accumulator as ea
from tensorboard.backend.event_processing import plugin_event_accumulator as pea

from gradlog.storage import atomic, streams
from gradlog.tensorboard import SummaryWriter, lifecycle
from gradlog.tensorboard.hparams import session_end_summary
from gradlog.tensorboard.reader import DamagedRecord, check_file, read_records
from gradlog.tensorboard.replay import shown_steps

STEPS, CHECKPOINT = 6, 4


def _session(log_dir, steps, *, purge_step=None, replay=None, offset=0.0, positions=None):
    """Log ``steps`` as a training loop would: per step a loss, an add_scalars pair, every
    other step a histogram and an image; at the end of "epoch" 0 (step 4, before the
    checkpoint) a validation scalar, an image and text. ``positions`` gets what sync() said at
    the checkpoint."""
    writer = SummaryWriter(log_dir, purge_step=purge_step, replay=replay)
    for step in steps:
        if step == CHECKPOINT and purge_step is None:
            writer.add_scalar("val/loss", 0.25, step)
            writer.add_image("epoch/image", np.full((1, 2, 2), 0.5), step)
            writer.add_text("epoch/notes", "end of epoch 0", step)
            writer.add_scalars("val", {"a": 1.0, "b": 2.0}, step)
            if positions is not None:
                positions.update(writer.sync())
        writer.add_scalar("train/loss", step + offset, step)
        writer.add_scalars("pair", {"x": step + offset, "y": -step - offset}, step)
        if step % 2 == 0:
            writer.add_histogram("weights", np.arange(4.0) + step + offset, step)
            writer.add_image("train/image", np.full((1, 2, 2), step / 10 + offset), step)
    return writer


@pytest.fixture
def resumed(tmp_path):
    """Session 1 runs to step 5 and dies (its files flushed, not closed); session 2 resumes
    from the checkpoint at step 4 with different values (offset 100), as a resumed run whose
    values we can tell apart."""
    log_dir = str(tmp_path / "run")
    positions: dict[str, int] = {}
    first = _session(log_dir, range(STEPS), positions=positions)
    first.flush()
    second = _session(log_dir, range(CHECKPOINT, STEPS), purge_step=CHECKPOINT,
                      replay=positions, offset=100.0)
    second.close()
    first.close()  # (late: its events were all on disk before the resume)
    return log_dir, positions


def _python_loaders(run_dir) -> dict[str, list[tuple[int, object]]]:
    """``{tag: [(step, value)]}`` as TensorBoard's server reads ``run_dir`` with its Python
    loader (``plugin_event_accumulator``): scalars as floats, images as PNG bytes, histograms
    as their minimum, text as bytes, an hparams session summary as None. The classic
    ``EventAccumulator`` must agree on scalars, images and histograms (it never purges
    tensors, so text and hparams are the server's only)."""
    server = pea.EventAccumulator(run_dir, size_guidance={pea.TENSORS: 0})
    server.Reload()
    served = {t: [e.step for e in server.Tensors(t)] for t in server.Tags()["tensors"]}
    classic = ea.EventAccumulator(run_dir, size_guidance={ea.SCALARS: 0, ea.IMAGES: 0,
                                                          ea.HISTOGRAMS: 0})
    classic.Reload()
    tags = classic.Tags()
    found = {t: [(e.step, e.value) for e in classic.Scalars(t)] for t in tags["scalars"]}
    found |= {t: [(e.step, e.encoded_image_string) for e in classic.Images(t)]
              for t in tags["images"]}
    found |= {t: [(e.step, e.histogram_value.min) for e in classic.Histograms(t)]
              for t in tags["histograms"]}
    assert {t: served[t] for t in found} == {t: [s for s, _ in p] for t, p in found.items()}
    for tag in set(served) - set(found):
        if server.SummaryMetadata(tag).plugin_data.plugin_name == "hparams":
            # (the trial's data is in each event's summary metadata; its tensor is empty)
            found[tag] = [(e.step, None) for e in server.Tensors(tag)]
        else:
            found[tag] = [(e.step, e.tensor_proto.string_val[0]) for e in server.Tensors(tag)]
    return found


def test_resume_keeps_what_preceded_the_checkpoint_and_hides_the_rest(resumed):
    log_dir, positions = resumed
    assert set(positions) == {os.path.relpath(p, log_dir).replace(os.sep, "/")
                              for d in (log_dir, *(os.path.join(log_dir, n) for n in
                                                   ("val_a", "val_b", "pair_x", "pair_y")))
                              for p in event_files(d)[:1]}
    found = _python_loaders(log_dir)
    assert found["train/loss"] == [(0, 0.0), (1, 1.0), (2, 2.0), (3, 3.0), (4, 104.0),
                                   (5, 105.0)]
    assert found["val/loss"] == [(4, 0.25)]  # logged before the checkpoint: replayed, once
    assert [s for s, _ in found["epoch/image"]] == [4]
    assert [s for s, _ in found["epoch/notes/text_summary"]] == [4]
    assert [s for s, _ in found["train/image"]] == [0, 2, 4]
    assert found["weights"] == [(0, 0.0), (2, 2.0), (4, 104.0)]  # session 2's at step 4
    for key, sign in (("x", 1), ("y", -1)):  # every add_scalars run purged and resumed
        points = _python_loaders(os.path.join(log_dir, f"pair_{key}"))["pair"]
        assert points == [(s, sign * (s + (100.0 if s >= CHECKPOINT else 0.0)))
                          for s in range(STEPS)]
    assert _python_loaders(os.path.join(log_dir, "val_a"))["val"] == [(4, 1.0)]


def test_shown_steps_apply_each_later_sessions_purge_as_the_python_loader(tmp_path):
    log_dir, end = str(tmp_path / "run"), "_hparams_/session_end_info"

    def session(purge_step, steps, end_at=None):
        writer = SummaryWriter(log_dir, purge_step=purge_step)
        for step in steps:
            writer.add_scalar("loss", float(step), step)
        if end_at is not None:
            writer.add_summary(session_end_summary(), end_at)
        writer.close()

    def both():
        mine = shown_steps(log_dir, ("loss", end))
        server = pea.EventAccumulator(log_dir, size_guidance={pea.TENSORS: 0})
        server.Reload()
        served = {t: [e.step for e in server.Tensors(t)] if t in server.Tags()["tensors"]
                  else [] for t in ("loss", end)}
        assert mine == served
        return mine

    session(None, range(9), end_at=8)
    assert both() == {"loss": list(range(9)), end: [8]}
    session(8, range(8, 10))  # an extension from the checkpoint at 8, stopped before its end
    assert both() == {"loss": list(range(10)), end: []}
    session(10, [], end_at=10)  # resumed at its last checkpoint: the trial ends
    assert both() == {"loss": list(range(10)), end: [10]}
    session(4, range(4, 6))  # resumed from an earlier checkpoint: everything >= 4 again
    assert both() == {"loss": list(range(6)), end: []}


@pytest.mark.server
@pytest.mark.slow
def test_the_rust_loader_shows_each_step_once_with_the_resumed_values(resumed):
    log_dir, _ = resumed
    server = TensorBoardServer(log_dir, "true")
    try:
        server.wait_ready()

        def scalars(run, tag):
            return [(p[1], p[2]) for p in server.get("/data/plugin/scalars/scalars", run=run,
                                                      tag=tag)]
        want = [(s, s + (100.0 if s >= CHECKPOINT else 0.0)) for s in range(STEPS)]
        server.wait_for(lambda: scalars(".", "train/loss") == want)
        server.wait_for(lambda: scalars("pair_x", "pair") == want)
        server.wait_for(lambda: scalars(".", "val/loss") == [(4, 0.25)])
        server.wait_for(lambda: scalars("val_b", "val") == [(4, 2.0)])
        images = server.wait_for(lambda: server.get("/data/plugin/images/images", run=".",
                                                    tag="epoch/image"))
        assert [i["step"] for i in images] == [4]
        series = server.get("/data/plugin/histograms/histograms", run=".", tag="weights")
        assert [s[1] for s in series] == [0, 2, 4]
        assert np.isclose(series[-1][2][0][0], 104.0)  # session 2's histogram at step 4
    finally:
        server.stop()


def test_sync_flushes_fsyncs_and_reports_each_files_size(tmp_path, monkeypatch):
    synced = []
    proxy = types.SimpleNamespace(**{n: getattr(os, n) for n in dir(os) if not n.startswith("__")})
    proxy.fsync = lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")
                                            if os.path.exists("/proc/self/fd") else fd),
                              os.fsync(fd))[1]
    monkeypatch.setattr(streams, "os", proxy)  # the file
    monkeypatch.setattr(atomic, "os", proxy)  # its directory
    writer = SummaryWriter(str(tmp_path / "run"), max_queue=1000, flush_secs=1000)
    writer.add_scalar("loss", 1.0, 0)
    writer.add_scalars("pair", {"a": 1.0}, 0)
    positions = writer.sync()
    paths = {rel: os.path.join(str(tmp_path / "run"), *rel.split("/")) for rel in positions}
    main = os.path.basename(writer.file_writer.event_writer.path)
    pair = writer.all_writers[os.path.join(str(tmp_path / "run"), "pair_a")]
    assert sorted(positions) == sorted(
        [main, "pair_a/" + os.path.basename(pair.event_writer.path)])
    for rel, size in positions.items():
        assert os.path.getsize(paths[rel]) == size  # flushed: every queued event is there
        assert len(list(read_records(paths[rel]))) >= 2
    if os.path.exists("/proc/self/fd"):
        for path in paths.values():
            assert path in synced and os.path.dirname(path) in synced  # file and directory
    writer.add_scalar("loss", 2.0, 1)
    assert writer.sync()[main] > positions[main]
    writer.close()


def test_replay_needs_the_step_and_names_a_missing_or_damaged_file(tmp_path):
    log_dir = str(tmp_path / "run")
    with pytest.raises(ValueError, match="replay needs purge_step"):
        SummaryWriter(log_dir, replay={"x": 1})
    with SummaryWriter(log_dir) as writer:
        for step in range(5):
            writer.add_scalar("loss", float(step), step)
        positions = writer.sync()
    (name,) = positions
    with pytest.raises(FileNotFoundError, match="missing") as missing:
        SummaryWriter(log_dir, purge_step=2, replay={"gone/" + name: 10})
    assert missing.value.filename.endswith(os.path.join("gone", name))
    path = os.path.join(log_dir, name)
    data = bytearray(open(path, "rb").read())
    records = list(read_records(path))
    offset = sum(12 + len(p) + 4 for p in records[:3])
    data[offset + 14] ^= 0x10  # a bit flip in the payload of record 3
    open(path, "wb").write(bytes(data))
    with pytest.raises(DamagedRecord, match=rf"record 3 \(at byte {offset}\).*payload"):
        SummaryWriter(log_dir, purge_step=2, replay=positions)


def test_check_file_tells_a_torn_tail_from_a_damaged_record(tmp_path):
    log_dir = str(tmp_path / "run")
    with SummaryWriter(log_dir) as writer:
        for step in range(4):
            writer.add_scalar("loss", float(step), step)
    (path,) = event_files(log_dir)
    whole = open(path, "rb").read()
    assert check_file(path).records == 5 and check_file(path).torn_bytes == 0
    open(path, "wb").write(whole[:-7])  # the last record cut: a crash mid-write
    torn = check_file(path)
    assert (torn.records, torn.damage) == (4, None) and torn.torn_bytes > 0
    damaged = bytearray(whole)
    damaged[3] ^= 0x01  # the first record's length
    open(path, "wb").write(bytes(damaged))
    check = check_file(path)
    assert check.records == 0 and check.damage.index == 0 and check.damage.offset == 0
    assert "length's CRC" in str(check.damage) and path in str(check.damage)


def test_a_program_that_owns_the_signals_gets_no_writer_handlers(tmp_path):
    gc.collect()
    if list(lifecycle._writers):
        pytest.skip("another test left a writer open")
    ours = signal.getsignal(signal.SIGTERM)
    with lifecycle.signals_owned_by_program():
        writer = SummaryWriter(str(tmp_path / "run"))
        assert signal.getsignal(signal.SIGTERM) is ours  # the writer installed nothing
        calls = []
        lifecycle.main_thread.busy += 1  # as if a signal interrupted a write()
        try:
            lifecycle.call_outside_writers(lambda: calls.append("stop"))
            assert calls == []
        finally:
            lifecycle.main_thread.busy -= 1
        writer.add_scalar("loss", 1.0, 0)
        writer.flush()  # leaving the critical section runs it
        assert calls == ["stop"]
        lifecycle.call_outside_writers(lambda: calls.append("now"))
        assert calls == ["stop", "now"]
    assert signal.getsignal(signal.SIGTERM) is lifecycle._on_signal  # the writer is open
    writer.close()
    assert signal.getsignal(signal.SIGTERM) is ours


def _damage_largest_entry(path) -> None:
    import zipfile
    with zipfile.ZipFile(path) as z:
        info = max(z.infolist(), key=lambda i: i.compress_size)
    data = bytearray(open(path, "rb").read())
    name_len, extra_len = (int.from_bytes(data[info.header_offset + o:info.header_offset + o
                                               + 2], "little") for o in (26, 28))
    data[info.header_offset + 30 + name_len + extra_len + info.compress_size // 2] ^= 0x10
    open(path, "wb").write(bytes(data))


@pytest.fixture(scope="module")
def resumed_training(tmp_path_factory):
    """``gradlog train`` (default plugins) for 2 epochs, its last checkpoint damaged, resumed
    from the one at step 4: the first session's events from step 4 on are hidden, what it
    logged at step 4 before that checkpoint is replayed, and the second session logs the rest
    again, with the same values."""
    import io

    from gradlog.train import TrainOptions, train
    root = tmp_path_factory.mktemp("train")
    run_dir = str(root / "run")
    tiny = {"train_size": 256, "val_size": 64, "two_object_size": 8}
    options = dict(epochs=2, quiet=True, extra=tiny,
                   plugins=("histogram:every=2,bins=20", "gradcam:every=3,num_images=2"))
    assert train(TrainOptions(logdir=run_dir, **options), io.StringIO(), io.StringIO()) == 0
    before = _python_loaders(run_dir)
    _damage_largest_entry(os.path.join(run_dir, "checkpoint-00000008.npz"))
    err = io.StringIO()
    assert train(TrainOptions(resume=run_dir, quiet=True), io.StringIO(), err) == 0
    assert "damaged entry" in err.getvalue()
    return run_dir, before


def test_a_resumed_training_run_reads_as_the_uninterrupted_one_in_the_python_loader(
        resumed_training):
    run_dir, before = resumed_training
    after = _python_loaders(run_dir)
    assert after.keys() == before.keys()
    last = before["val/loss"][-1][0]  # the trial: its start at 0, one end at the last step
    assert after["_hparams_/session_start_info"] == [(0, None)]
    assert after["_hparams_/session_end_info"] == [(last, None)]
    for tag, points in before.items():
        if any(t in tag for t in ("steps_per_sec", "ms_per_step", "queue_waits")):  # timings
            assert [s for s, _ in after[tag]] == [s for s, _ in points], tag
        else:
            assert after[tag] == points, tag


@pytest.mark.server
@pytest.mark.slow
@pytest.mark.parametrize("load_fast", ["false", "true"])
def test_a_resumed_training_run_has_each_step_once_on_both_servers(resumed_training,
                                                                   load_fast):
    run_dir, before = resumed_training
    # the second session's timings differ from the first's: once the server shows them, it
    # has read both sessions' files (the rest is the same either way)
    after = _python_loaders(run_dir)
    timings = {t: after[t] for t in after if "steps_per_sec" in t or "ms_per_step" in t}
    assert timings != {t: before[t] for t in timings}
    server = TensorBoardServer(run_dir, load_fast)
    try:
        server.wait_ready()
        server.wait_for(lambda: all([(p[1], p[2]) for p in server.get(
            "/data/plugin/scalars/scalars", run=".", tag=t)] == points
            for t, points in timings.items()))
        for tag in ("train/loss", "val/loss", "grad-norm/global"):
            want = [s for s, _ in before[tag]]
            server.wait_for(lambda tag=tag, want=want: [p[1] for p in server.get(
                "/data/plugin/scalars/scalars", run=".", tag=tag)] == want)
        image = next(t for t in before if t.startswith("gradcam/conv"))
        server.wait_for(lambda: [i["step"] for i in server.get(
            "/data/plugin/images/images", run=".", tag=image)] == [s for s, _ in before[image]])
        histogram = next(t for t in before if t.startswith("histogram/weight/"))
        server.wait_for(lambda: [h[1] for h in server.get(
            "/data/plugin/histograms/histograms", run=".", tag=histogram)]
            == [s for s, _ in before[histogram]])
    finally:
        server.stop()
