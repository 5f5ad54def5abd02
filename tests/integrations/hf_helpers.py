"""A tiny BERT built from a config (nothing downloaded), its dict batches, and a reader of
scalars and histograms written by gradlog and by the Trainer (gradlog's record reader)."""

from __future__ import annotations

import os

import numpy as np
import torch
from tensorboard.compat.proto.event_pb2 import Event

from gradlog.tensorboard.reader import read_records

os.environ["HF_HUB_OFFLINE"] = "1"


def tiny_bert(seed: int = 0):
    from transformers import BertConfig, BertForSequenceClassification
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=37,
                        max_position_embeddings=16, num_labels=3)
    return BertForSequenceClassification(config)


def dict_batches(n: int = 32, length: int = 8, seed: int = 0) -> list[dict]:
    """``n`` examples as the Trainer's datasets give them: one dict of tensors each."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 64, (n, length), generator=g)
    labels = torch.randint(0, 3, (n,), generator=g)
    return [{"input_ids": ids[i], "attention_mask": torch.ones(length, dtype=torch.long),
             "labels": labels[i]} for i in range(n)]


def norm(grads) -> float:
    return float(np.sqrt(sum((g ** 2).sum() for g in grads)))


def assert_histograms_are(events, step: int, grads: dict) -> None:
    """gradlog's raw and final gradient histograms at ``step`` summarise ``grads`` (by name)."""
    import pytest
    for name, g in grads.items():
        for kind in ("grad", "grad_raw"):
            h = events.histograms[f"histogram/{kind}/{name}"][step]
            assert (h.num, h.min, h.max) == (g.size, pytest.approx(g.min(), rel=1e-5),
                                             pytest.approx(g.max(), rel=1e-5)), (name, kind)
            assert h.sum_squares == pytest.approx((g ** 2).sum(), rel=1e-4), (name, kind)


class Events:
    """Scalars ``{tag: {step: value}}``, histograms ``{tag: {step: HistogramProto}}``."""

    def __init__(self) -> None:
        self.scalars: dict[str, dict[int, float]] = {}
        self.histograms: dict[str, dict[int, object]] = {}


def read_events(directory: str) -> Events:
    """The events of the event files directly in ``directory`` (gradlog's and others')."""
    events = Events()
    for name in sorted(os.listdir(directory)):
        if "tfevents" not in name:
            continue
        for payload in read_records(os.path.join(directory, name)):
            event = Event.FromString(payload)
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    events.scalars.setdefault(value.tag, {})[event.step] = value.simple_value
                elif value.HasField("histo"):
                    events.histograms.setdefault(value.tag, {})[event.step] = value.histo
                elif value.metadata.plugin_data.plugin_name == "scalars":
                    t = value.tensor
                    number = t.float_val[0] if t.float_val else \
                        np.frombuffer(t.tensor_content, np.float32)[0]
                    events.scalars.setdefault(value.tag, {})[event.step] = float(number)
    return events
