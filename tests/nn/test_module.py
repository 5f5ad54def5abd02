"""nn.Module's registration, iteration, modes, conversion, state dicts and repr, with
PyTorch's behaviour (compared where the torch oracle is installed)."""

import copy

import numpy as np
import pytest

import gradlog as gl
from gradlog import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)
        self.register_buffer("count", gl.zeros(1))
        self.register_buffer("scratch", gl.zeros(2), persistent=False)
        self.extra = nn.Parameter(gl.ones(2))

    def forward(self, x):
        return self.fc(x) * self.extra


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = Block()
        self.b = nn.Sequential(nn.Linear(2, 2), nn.ReLU())


def test_attribute_assignment_registers_parameters_buffers_and_modules():
    net = Net()
    assert [n for n, _ in net.named_parameters()] == [
        "a.extra", "a.fc.weight", "a.fc.bias", "b.0.weight", "b.0.bias"]
    assert [n for n, _ in net.named_buffers()] == ["a.count", "a.scratch"]
    assert [n for n, _ in net.named_modules()] == ["", "a", "a.fc", "b", "b.0", "b.1"]
    assert [n for n, _ in net.named_children()] == ["a", "b"]
    assert list(net.state_dict()) == ["a.extra", "a.count", "a.fc.weight", "a.fc.bias",
                                      "b.0.weight", "b.0.bias"]  # non-persistent left out
    assert net.get_submodule("b.0") is net.b[0]
    with pytest.raises(AttributeError, match="has no attribute `c`"):
        net.get_submodule("a.c")
    with pytest.raises(TypeError, match="cannot assign 'int' as parameter 'extra'"):
        net.a.extra = 3


def test_load_state_dict_lists_missing_unexpected_and_size_mismatch():
    net = Net()
    sd = net.state_dict()
    sd.pop("a.fc.bias")
    sd["a.surprise"] = gl.zeros(1)
    sd["b.0.weight"] = gl.zeros(3, 3)
    with pytest.raises(RuntimeError) as info:
        net.load_state_dict(sd)
    message = str(info.value)
    assert message.startswith("Error(s) in loading state_dict for Net:")
    assert 'Missing key(s) in state_dict: "a.fc.bias"' in message
    assert 'Unexpected key(s) in state_dict: "a.surprise"' in message
    assert ("size mismatch for b.0.weight: copying a param with shape [3, 3] from checkpoint, "
            "the shape in current model is [2, 2]") in message
    result = Net().load_state_dict({k: v for k, v in Net().state_dict().items()
                                    if k != "a.count"}, strict=False)
    assert result.missing_keys == ["a.count"] and result.unexpected_keys == []


def test_load_state_dict_copies_values_into_the_same_parameter_objects():
    src, dst = Net(), Net()
    weight = dst.a.fc.weight
    dst.load_state_dict(src.state_dict())
    assert dst.a.fc.weight is weight
    np.testing.assert_array_equal(weight.detach().numpy(), src.a.fc.weight.detach().numpy())


def test_state_dict_hooks():
    net = Net()
    seen = []
    net.register_state_dict_pre_hook(lambda m, prefix, keep_vars: seen.append(prefix))
    net.register_state_dict_post_hook(lambda m, sd, prefix, meta: sd.update(extra=gl.ones(1)))
    assert "extra" in net.state_dict() and seen == [""]
    net.register_load_state_dict_post_hook(lambda m, keys: keys.unexpected_keys.clear())
    sd = net.state_dict()  # holds "extra", which the post hook forgives
    assert net.load_state_dict(sd).unexpected_keys == []


def test_modes_conversion_zero_grad_and_apply():
    net = Net()
    assert net.eval() is net and not net.b[1].training
    net.train()
    assert all(m.training for m in net.modules())
    weight = net.a.fc.weight
    net.to(gl.float64)
    assert net.a.fc.weight is weight and weight.dtype == gl.float64
    assert net.a.count.dtype == gl.float64
    (net.a(gl.randn(4, 3, dtype=gl.float64))).sum().backward()
    assert net.a.fc.weight.grad is not None
    net.zero_grad()
    assert net.a.fc.weight.grad is None
    order = []
    net.apply(lambda m: order.append(type(m).__name__))
    assert order == ["Linear", "Block", "Linear", "ReLU", "Sequential", "Net"]
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())


def test_deepcopy_copies_parameters_and_hook_registries():
    net = Net()
    calls = []
    net.register_forward_hook(lambda *a: calls.append("hook"))
    clone = copy.deepcopy(net)
    assert clone.a.fc.weight is not net.a.fc.weight
    np.testing.assert_array_equal(clone.a.fc.weight.numpy(force=True),
                                  net.a.fc.weight.numpy(force=True))
    assert len(clone._forward_hooks) == 1 and clone._forward_hooks is not net._forward_hooks


def test_repr_and_call_fast_path_match_pytorch():
    torch = pytest.importorskip("torch")
    ours = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
                         nn.Sequential(nn.Flatten(), nn.Linear(4, 2)))
    theirs = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
                                 torch.nn.Sequential(torch.nn.Flatten(),
                                                     torch.nn.Linear(4, 2)))
    assert repr(ours) == repr(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
