"""computed_once: one computation whoever asks, and nothing held once it has run."""

from __future__ import annotations

import gc
import threading
import weakref

import pytest

from gradlog.utils.once import computed_once


class Held:
    """Stands for the snapshots a statistics function holds."""


def test_the_first_call_computes_and_every_call_gets_that_result():
    calls = []
    result = computed_once(lambda: calls.append(1) or [len(calls)])
    assert result() == [1] and result() == [1] and calls == [1]


def test_two_threads_at_once_compute_once():
    started, calls = threading.Event(), []

    def slow() -> list:
        calls.append(1)
        started.wait(5)
        return [len(calls)]
    result = computed_once(slow)
    got: list = []
    threads = [threading.Thread(target=lambda: got.append(result())) for _ in range(2)]
    for t in threads:
        t.start()
    started.set()
    for t in threads:
        t.join(timeout=10)
    assert calls == [1] and got == [[1], [1]]


def test_what_the_function_holds_is_freed_once_it_has_run():
    held = Held()
    alive = weakref.ref(held)
    result = computed_once(lambda held=held: [1.0])
    del held
    gc.collect()
    assert alive() is not None  # (not computed yet: the function and its snapshots stay)
    assert result() == [1.0]
    gc.collect()
    assert alive() is None and result() == [1.0]


def test_a_failed_computation_is_tried_again():
    attempts = []

    def flaky() -> list:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("first")
        return [2.0]
    result = computed_once(flaky)
    with pytest.raises(RuntimeError, match="first"):
        result()
    assert result() == [2.0] and len(attempts) == 2
