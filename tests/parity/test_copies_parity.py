"""pickle and copy.deepcopy of modules and tensors against PyTorch: hook registries travel with
a module (module-level functions survive, a lambda makes pickle fail with its own error), and
tensors keep their values and ``requires_grad`` but never their graph, grad or hooks."""

import copy
import pickle
import warnings

import pytest
from dual import assert_same, raised

torch = pytest.importorskip("torch")


def record_output(module, args, output):
    module.seen.append(output)


def double_input(module, args):
    return (args[0] * 2,)


class Counter:
    """A callable hook object: deep-copied with the module, as any object in its dict."""

    def __init__(self):
        self.calls = 0

    def __call__(self, module, args, output):
        self.calls += 1


def count_load(module, state_dict, prefix, local_metadata, strict, missing, unexpected, errors):
    module.loads += 1


def a_hook_called_with_its_module_follows_the_copy(L, log):
    lin = L.nn.Linear(2, 1)
    lin.loads = 0
    lin._register_load_state_dict_pre_hook(count_load, True)
    state = lin.state_dict()
    for c in (pickle.loads(pickle.dumps(lin)), copy.deepcopy(lin)):
        c.load_state_dict(state)
        c.load_state_dict(state)
        log += [c.loads, lin.loads]
    lin.load_state_dict(state)
    log.append(lin.loads)


def module_hooks_travel_with_pickle_and_deepcopy(L, log):
    lin = L.nn.Linear(2, 1)
    with L.no_grad():
        lin.weight.copy_(L.tensor([[0.5, -1.0]]))
        lin.bias.fill_(0.25)
    lin.seen = []
    lin.register_forward_hook(record_output)
    lin.register_forward_pre_hook(double_input, prepend=True)
    counter = Counter()
    lin.register_forward_hook(counter, always_call=True)
    lin.weight.grad = L.ones(1, 2)
    x = L.tensor([[1.0, 2.0]])
    for c in (pickle.loads(pickle.dumps(lin)), copy.deepcopy(lin)):
        log += [c(x), c.seen, len(lin.seen), len(c._forward_hooks),
                list(c._forward_hooks_always_called.values())]
        hook = list(c._forward_hooks.values())[-1]
        log += [hook is counter, counter.calls, c.weight is lin.weight,
                c.weight.requires_grad, type(c.weight).__name__]
    log.append(copy.deepcopy(lin).weight.grad)  # (a Parameter's copy drops it)


def a_handle_kept_on_the_module_removes_from_the_copy(L, log):
    lin = L.nn.Linear(2, 1)
    lin.handle = lin.register_forward_hook(record_output)
    for c in (copy.deepcopy(lin), pickle.loads(pickle.dumps(lin))):
        log.append((len(c._forward_hooks), c.handle.id == lin.handle.id))
        c.handle.remove()
        log.append((len(c._forward_hooks), len(lin._forward_hooks)))
    log.append(lin.register_forward_hook(record_output).id > lin.handle.id)


def a_lambda_hook_fails_under_pickle_only(L, log):
    lin = L.nn.Linear(2, 1)
    handle = lin.register_forward_hook(lambda m, a, o: o * 0)
    log.append(raised(lambda: pickle.dumps(lin), n=30))
    c = copy.deepcopy(lin)
    handle.remove()  # the handle belongs to the original
    log += [len(lin._forward_hooks), len(c._forward_hooks), c(L.ones(1, 2)).shape]


def tensors_pickle_as_leaves_without_hooks(L, log):
    x = L.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    z = pickle.loads(pickle.dumps(y))
    log += [z, z.is_leaf, z.requires_grad, z.grad_fn]
    x.register_hook(lambda g: g * 2)
    x.grad = L.ones(2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        p = pickle.loads(pickle.dumps(x))
    log += [[str(w.message).startswith("backward hook") for w in caught], p.grad]
    (p * 3).sum().backward()
    log.append(p.grad)
    d = copy.deepcopy(x)
    (d * 3).sum().backward()
    log.append(d.grad)  # the copied grad plus 3, no hook
    log.append(raised(lambda: copy.deepcopy(y), n=80))
    w = L.nn.Parameter(L.ones(2))
    q = pickle.loads(pickle.dumps(w))
    log += [type(q).__name__, q.requires_grad, q]


PROGRAMS = [module_hooks_travel_with_pickle_and_deepcopy,
            a_hook_called_with_its_module_follows_the_copy,
            a_handle_kept_on_the_module_removes_from_the_copy,
            a_lambda_hook_fails_under_pickle_only,
            tensors_pickle_as_leaves_without_hooks]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_same_observations_as_pytorch(program):
    assert_same(program)
