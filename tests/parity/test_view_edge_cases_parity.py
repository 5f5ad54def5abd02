"""Edge cases of views against PyTorch: in-place view ops on the outputs of multi-view ops,
views of a leaf made to require grad after its base, views taken before their base changed
shape in place, views made under no_grad, hooks across an in-place view op, and inference
tensors through pickle and deepcopy."""

import copy
import pickle

import pytest
from dual import assert_same, raised

torch = pytest.importorskip("torch")


def t(L, data, **kw):
    return L.tensor(data, **kw)


def pickled_or_copied_inference_tensors_are_normal(L, log):
    with L.inference_mode():
        n = L.ones(2)
    log += [pickle.loads(pickle.dumps(n)).is_inference(), copy.deepcopy(n).is_inference()]


@pytest.mark.parametrize("program", [pickled_or_copied_inference_tensors_are_normal])
def test_same_as_pytorch(program):
    assert_same(program)
