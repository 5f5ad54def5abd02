"""Sequential, ModuleList and ModuleDict: list/dict behaviour, registration of children
(parameters, state_dict keys, train/eval), and PyTorch's reprs."""

from __future__ import annotations

from collections import OrderedDict

import pytest

import gradlog as gl
from gradlog import nn


def _mlp() -> nn.Sequential:
    return nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2), nn.Tanh())


def test_sequential_calls_modules_in_order():
    model = _mlp()
    x = gl.randn(5, 4)
    expected = model[3](model[2](model[1](model[0](x))))
    assert gl.equal(model(x), expected)


def test_sequential_indexing_slicing_len_and_iteration():
    model = _mlp()
    assert len(model) == 4
    assert isinstance(model[1], nn.ReLU) and model[-1] is model[3]
    head = model[:2]
    assert isinstance(head, nn.Sequential) and len(head) == 2
    assert head[0] is model[0]  # a slice shares the modules
    assert list(head._modules) == ["0", "1"]
    assert [type(m).__name__ for m in model] == ["Linear", "ReLU", "Linear", "Tanh"]
    with pytest.raises(IndexError, match="index 4 is out of range"):
        model[4]


def test_sequential_from_ordered_dict_keeps_names():
    model = nn.Sequential(OrderedDict([("conv", nn.Conv2d(1, 2, 3)), ("act", nn.ReLU())]))
    assert model.conv is model[0]
    assert list(model.state_dict()) == ["conv.weight", "conv.bias"]
    assert isinstance(model[1:], nn.Sequential) and list(model[1:]._modules) == ["act"]


def test_sequential_append_insert_delete_renumber():
    model = nn.Sequential(nn.ReLU())
    assert model.append(nn.Tanh()) is model
    model.insert(0, nn.Sigmoid())
    assert [type(m).__name__ for m in model] == ["Sigmoid", "ReLU", "Tanh"]
    del model[1]
    assert list(model._modules) == ["0", "1"] and isinstance(model[1], nn.Tanh)
    model[0] = nn.GELU()
    assert isinstance(model[0], nn.GELU)
    assert isinstance(model.pop(0), nn.GELU) and len(model) == 1
    with pytest.raises(TypeError, match="int is not a Module subclass"):
        model.append(3)


def test_containers_register_parameters_and_modes():
    layers = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    heads = nn.ModuleDict({"a": nn.Linear(2, 1), "b": nn.BatchNorm1d(2)})

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers, self.heads = layers, heads

    net = Net()
    assert len(list(net.parameters())) == 6 + 2 + 2
    assert list(net.state_dict())[:2] == ["layers.0.weight", "layers.0.bias"]
    assert "heads.b.num_batches_tracked" in net.state_dict()
    net.eval()
    assert not heads["b"].training and not layers[2].training


def test_module_list_behaves_like_a_list():
    ml = nn.ModuleList([nn.ReLU(), nn.Tanh()])
    ml += [nn.Sigmoid()]
    ml.append(nn.GELU()).extend([nn.SiLU()])
    assert len(ml) == 5 and isinstance(ml[-1], nn.SiLU)
    assert isinstance(ml[1:3], nn.ModuleList) and len(ml[1:3]) == 2
    ml.insert(1, nn.ELU())
    assert isinstance(ml[1], nn.ELU) and isinstance(ml[2], nn.Tanh)
    with pytest.raises(NotImplementedError):
        ml(gl.zeros(1))


def test_module_dict_behaves_like_a_dict():
    md = nn.ModuleDict([("a", nn.ReLU())])
    md["b"] = nn.Tanh()
    md.update({"c": nn.Sigmoid()})
    assert list(md) == ["a", "b", "c"] and list(md.keys()) == ["a", "b", "c"]
    assert "b" in md and len(md) == 3
    assert isinstance(md.pop("a"), nn.ReLU) and list(md) == ["b", "c"]
    with pytest.raises(TypeError, match="int is not a Module subclass"):
        nn.ModuleDict({"x": 3})


def test_container_reprs():
    assert repr(nn.ModuleList([nn.Linear(2, 2) for _ in range(3)] + [nn.ReLU()])) == (
        "ModuleList(\n  (0-2): 3 x Linear(in_features=2, out_features=2, bias=True)\n"
        "  (3): ReLU()\n)")
    assert repr(nn.Sequential(nn.Linear(2, 2), nn.ReLU())) == (
        "Sequential(\n  (0): Linear(in_features=2, out_features=2, bias=True)\n"
        "  (1): ReLU()\n)")
    assert repr(nn.ModuleDict({"a": nn.ReLU()})) == "ModuleDict(\n  (a): ReLU()\n)"
    assert repr(nn.ModuleList()) == "ModuleList()" and repr(nn.Sequential()) == "Sequential()"
