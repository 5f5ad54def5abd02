"""Modules called several times per forward pass and modules returning containers (a reused
ReLU, a (down, skip) block, nn.LSTM, nn.MultiheadAttention): every call and every tensor is
logged under its documented name with the values a float64 forward gives; gradcam picks a
tensor with output= and says once, in one line, what a layer it cannot use returned."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from patterns_helpers import Patterns, batches, captured, float64_copy, sgd_steps

import gradlog as gl
from gradlog.plugin.outputs import named_tensors, pick_output
from gradlog.testing import MemoryWriter

torch = pytest.importorskip("torch")


def _train(plugins, steps=2, probe=None, writer=None):
    torch.manual_seed(0)
    model = Patterns()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = batches(steps)
    writer = writer if writer is not None else MemoryWriter()
    copies = []
    with gl.watch(model, opt, writer=writer, strict=True, plugins=plugins,
                  probe_sets={"probe": {"images": probe}} if probe is not None else None) as run:
        for x, y in data:
            copies.append(float64_copy(model))
            sgd_steps(model, opt, [(x, y)])
    _train.run = run
    return writer, copies, data


def test_every_call_and_every_tensor_of_a_container_gets_its_histogram():
    writer, copies, data = _train(["histogram:every=1,kinds=[\"activation\"]"])
    expected_tags = {"conv", "relu", "relu-1", "down.conv", "lstm.0", "lstm.1.0", "lstm.1.1",
                     "attn.0", "attn.1", "head"}
    logged = {t.removeprefix("histogram/activation/") for t in writer.tags("histogram")}
    assert logged == expected_tags
    for step, (x, _) in enumerate(data):
        ref = captured(copies[step], x.double(), ["conv", "relu", "down.conv", "lstm", "attn",
                                                  "head"])
        for (name, call), output in ref.items():
            prefix = name if call == 0 else f"{name}-{call}"
            for path, value in named_tensors(output, torch.is_tensor, prefix):
                series = writer.series("histogram", f"histogram/activation/{path}")
                assert series.steps == [0, 1], path
                np.testing.assert_allclose(series.values[step],
                                           value.detach().numpy().reshape(-1),
                                           rtol=1e-5, atol=1e-6, err_msg=path)


def test_the_lstms_histogram_counts_are_numpys_of_its_output(tmp_path):
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto.event_pb2 import Event

    from gradlog.tensorboard import SummaryWriter

    def read_events(path):
        return [Event.FromString(raw) for f in sorted(path.iterdir()) if "tfevents" in f.name
                for raw in RawEventFileLoader(str(f)).Load()]

    with SummaryWriter(str(tmp_path)) as writer:
        _, copies, data = _train(["histogram:every=1,kinds=[\"activation\"],bins=12"], steps=1,
                                 writer=writer)
    (event,) = [e for e in read_events(tmp_path) for v in e.summary.value
                if v.tag == "histogram/activation/lstm.0"]
    (value,) = [v for v in event.summary.value if v.tag == "histogram/activation/lstm.0"]
    hist = value.histo
    out = captured(copies[0], data[0][0].double(), ["lstm"])[("lstm", 0)][0]
    direct = out.detach().numpy().astype(np.float32).reshape(-1)
    counts, _ = np.histogram(direct, bins=12, range=(direct.min(), direct.max()))
    assert list(hist.bucket) == counts.tolist()
    assert hist.num == direct.size and hist.min == pytest.approx(direct.min(), rel=1e-6)


@pytest.mark.parametrize("options, module, call, pick", [
    ("layer=down,output=0", "down", 0, lambda out: out[0]),  # (down, skip): down
    ("layer=relu,call=1", "relu", 1, lambda out: out),  # the reused ReLU's second call
])
def test_gradcam_explains_the_tensor_and_call_picked(options, module, call, pick):
    probe = torch.randn(2, 1, 6, 6)
    writer, copies, _ = _train([f"gradcam:{options},every=1,target=1"], steps=1, probe=probe)
    assert writer.series("image", f"gradcam/{module}").steps == [0]
    # the map, independently: Grad-CAM of class 1 at that tensor, in float64 (the probe at
    # the start of training, on the weights before the first step)
    ref = copies[0].eval()
    kept = []

    def keep(m, args, output):
        kept.append(pick(output))
    ref.get_submodule(module).register_forward_hook(keep)
    score = ref(probe.double())[:, 1].sum()
    (grad,) = torch.autograd.grad(score, kept[call])
    weights = grad.mean(dim=(2, 3), keepdim=True)
    cam = torch.relu((weights * kept[call]).sum(1)).detach().numpy()
    np.testing.assert_allclose(_train.run.plugin("gradcam").last["cams"], cam, rtol=1e-4,
                               atol=1e-7)


@pytest.mark.parametrize("layer, what", [
    ("lstm", "a tuple (0: (2, 9, 5), 1.0: (1, 2, 5), 1.1: (1, 2, 5)); Grad-CAM needs one "
             "(N, C, H, W) tensor; pick one with output=<index or key> (0, 1.0, 1.1)"),
    ("down", "a tuple (0: (2, 4, 3, 3), 1: (2, 4, 6, 6)); Grad-CAM needs one (N, C, H, W) "
             "tensor; pick one with output=<index or key> (0, 1)"),
])
def test_gradcam_says_once_what_a_layer_it_cannot_use_returned(layer, what):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        writer, _, _ = _train([f"gradcam:layer={layer},every=1"], steps=3,
                              probe=torch.randn(2, 1, 6, 6))
    said = [str(w.message) for w in caught if "gradcam" in str(w.message)]
    assert said == [f"gradcam: layer '{layer}' returned {what}; no maps are logged"]
    assert writer.series("text", "gradcam/notice").values == said


def test_pick_output_names_the_keys_there_are():
    assert pick_output({"a": 1, "b": 2}, "b") == 2
    assert pick_output((1, 2), 1) == 2
    with pytest.raises(KeyError, match="no 'c' in the output; it has: a, b"):
        pick_output({"a": 1, "b": 2}, "c")


def test_named_tensors_walk_dicts_dataclasses_and_nested_tuples_in_order():
    import dataclasses
    from collections import OrderedDict

    @dataclasses.dataclass
    class Pair:
        first: object
        second: object

    class ModelOutput(OrderedDict):  # as transformers' (a dict of its non-None fields)
        pass

    a, b, c, d = (torch.full((1,), float(i)) for i in range(4))
    out = ModelOutput(last_hidden_state=a, hidden_states=(b, Pair(c, None)), logits=d)
    named = named_tensors(out, torch.is_tensor, "bert")
    assert [(path, float(t)) for path, t in named] == [
        ("bert.last_hidden_state", 0.0), ("bert.hidden_states.0", 1.0),
        ("bert.hidden_states.1.first", 2.0), ("bert.logits", 3.0)]
    assert named_tensors(a, torch.is_tensor, "x") == [("x", a)]
    assert named_tensors("text", torch.is_tensor, "x") == []
