"""Models of other libraries: activation-stats finds their activation modules by class name
(stand-ins named as transformers' and timm's classes; neither library is needed), anything
named by include=, and a Hugging Face-style dict batch: probed as keyword arguments, and the
plugins that need (inputs, targets) or image probes say so in one line."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from patterns_helpers import Patterns, batches, float64_copy, sgd_steps

import gradlog as gl
from gradlog.testing import MemoryWriter

torch = pytest.importorskip("torch")
nn = torch.nn
F = nn.functional


# stand-ins with the class names of transformers (GELUActivation, NewGELUActivation,
# SiLUActivation, LinearActivation) and timm (GELUTanh, Swish, HardSigmoidMe)
class GELUActivation(nn.Module):
    def forward(self, x):
        return F.gelu(x)


class NewGELUActivation(nn.Module):
    def forward(self, x):
        return F.gelu(x, approximate="tanh")


class SiLUActivation(nn.Module):
    def forward(self, x):
        return F.silu(x)


class LinearActivation(nn.Module):  # the identity: not an activation to watch
    def forward(self, x):
        return x


class GELUTanh(nn.Module):
    def forward(self, x):
        return F.gelu(x, approximate="tanh")


class Swish(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(x)


class HardSigmoidMe(nn.Module):
    def forward(self, x):
        return F.hardsigmoid(x)


class ReLUBlock(nn.Module):  # a block of layers named like an activation: not one
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x):
        return self.fc(x)


ACTIVATIONS = {"block": ReLUBlock, "gelu": GELUActivation, "new_gelu": NewGELUActivation,
               "silu": SiLUActivation, "gelu_tanh": GELUTanh, "swish": Swish,
               "hard_sigmoid": HardSigmoidMe, "linear_act": LinearActivation}


class Mixed(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 6)
        for name, cls in ACTIVATIONS.items():
            self.add_module(name, cls())
        self.head = nn.Linear(6, 2)

    def forward(self, x):
        h = self.fc(x)
        for name in ACTIVATIONS:
            h = getattr(self, name)(h)
        return self.head(h)


def _expected_stats(ref, x, name, saturating):
    """mean, std and dead / saturated fraction of module ``name``'s output, in float64."""
    with torch.no_grad():
        h = ref.fc(x.double())
        for n in ACTIVATIONS:
            h = getattr(ref, n)(h)
            if n == name:
                break
    out = {"mean": float(h.mean()), "std": float(h.std(unbiased=False))}
    if saturating:
        out["saturated_fraction"] = float(((h < 0.015) | (h > 0.985)).double().mean())
    else:
        out["dead_fraction"] = float((h <= 0).all(dim=0).double().mean())
    return out


def _run(options, model, steps=2, data=None):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    probe = torch.randn(5, 4, generator=torch.Generator().manual_seed(1))
    data = data or [(torch.randn(5, 4), torch.randint(0, 2, (5,))) for _ in range(steps)]
    writer, after = MemoryWriter(), []
    with gl.watch(model, opt, writer=writer, strict=True,
                  plugins=[f"activation-stats:every=1{options}"],
                  probe_sets={"probe": {"images": probe}}):
        for x, y in data:
            sgd_steps(model, opt, [(x, y)])
            after.append(float64_copy(model))  # (probed after the step's update)
    return writer, after, probe


def test_activation_modules_of_other_libraries_are_found_by_class_name():
    torch.manual_seed(0)
    writer, after, probe = _run("", Mixed())
    names = {t.split("/")[1] for t in writer.tags("scalar") if t.startswith("activation-stats")}
    assert names == {"gelu", "new_gelu", "silu", "gelu_tanh", "swish", "hard_sigmoid"}
    for name in sorted(names):
        saturating = name == "hard_sigmoid"
        for step in (0, 1):
            expected = _expected_stats(after[step].eval(), probe, name, saturating)
            for key, value in expected.items():
                logged = writer.series("scalar", f"activation-stats/{name}/{key}")
                assert logged.values[step] == pytest.approx(value, rel=1e-5, abs=1e-7), \
                    (name, key, step)


def test_include_probes_any_module_and_each_tensor_it_returns():
    torch.manual_seed(0)
    model = Patterns()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    probe = torch.randn(3, 1, 6, 6)
    writer = MemoryWriter()
    with gl.watch(model, opt, writer=writer, strict=True,
                  plugins=['activation-stats:every=1,include=["lstm", "fc*"]'],
                  probe_sets={"probe": {"images": probe}}):
        sgd_steps(model, opt, batches(1))
        ref = float64_copy(model).eval()
    kept = {}

    def keep(module, args, output):
        kept["lstm"] = output
    ref.lstm.register_forward_hook(keep)
    with torch.no_grad():
        ref(probe.double())
    out, (h, c) = kept["lstm"]
    for path, tensor in (("lstm.0", out), ("lstm.1.0", h), ("lstm.1.1", c)):
        assert writer.series("scalar", f"activation-stats/{path}/mean").values == \
            pytest.approx([float(tensor.mean())], rel=1e-5)
        assert writer.series("scalar", f"activation-stats/{path}/std").values == \
            pytest.approx([float(tensor.std(unbiased=False))], rel=1e-5)


class BertLike(nn.Module):
    """A Hugging Face-style model: keyword inputs, a dict output."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 6)
        self.act = GELUActivation()
        self.classifier = nn.Linear(6, 2)

    def forward(self, input_ids, attention_mask):
        h = self.act(self.embed(input_ids)) * attention_mask[..., None]
        return {"logits": self.classifier(h.mean(1)), "last_hidden_state": h}


def _dict_batch(n=4):
    g = torch.Generator().manual_seed(0)
    return {"input_ids": torch.randint(0, 10, (n, 5), generator=g),
            "attention_mask": torch.ones(n, 5), "labels": torch.randint(0, 2, (n,), generator=g)}


def test_a_dict_probe_is_fed_as_keyword_arguments():
    torch.manual_seed(0)
    model = BertLike()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    probe = {k: v for k, v in _dict_batch(3).items() if k != "labels"}
    writer = MemoryWriter()
    with gl.watch(model, opt, writer=writer, strict=True, plugins=["activation-stats:every=1"],
                  probe_sets={"probe": {"images": probe}}):
        batch = _dict_batch()
        opt.zero_grad()
        out = model(batch["input_ids"], batch["attention_mask"])
        F.cross_entropy(out["logits"], batch["labels"]).backward()
        opt.step()
        ref = float64_copy(model).eval()
    with torch.no_grad():
        expected = F.gelu(ref.embed(probe["input_ids"]))
    assert writer.series("scalar", "activation-stats/act/mean").values == pytest.approx(
        [float(expected.mean())], rel=1e-5)


def test_plugins_that_need_inputs_and_targets_say_so_in_one_line_for_a_dict_batch():
    model = BertLike()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(Exception, match="adversarial needs training batches of "
                       r"\(inputs, targets\), got a dict with keys input_ids, attention_mask, "
                       "labels"):
        with gl.watch(model, opt, writer=MemoryWriter(), plugins=["adversarial"]) as run:
            run.batch(_dict_batch())
    writer = MemoryWriter()
    probe = {k: v for k, v in _dict_batch(3).items() if k != "labels"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with gl.watch(model, opt, writer=writer, strict=True, plugins=["gradcam:layer=act,every=1"],
                      probe_sets={"probe": {"images": probe}}):
            pass
    notices = writer.series("text", "gradcam/notice").values
    assert any("the probe set 'probe' holds a dict of inputs (input_ids, attention_mask), "
               "not images" in n for n in notices)
    assert np.all(["\n" not in n for n in notices])
