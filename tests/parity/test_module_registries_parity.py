"""Module registries against PyTorch: load_state_dict pre-hooks (public and private), the global
buffer/module/parameter registration hooks, the deprecated (legacy) backward hooks with their
FutureWarnings, the flag dicts PyTorch code inspects, and full backward hooks in double
backward."""

import warnings

import pytest
from dual import assert_same, raised

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")


def t(L, data, **kw):
    return L.tensor(data, **kw)


def _module_api(L):
    return L.nn.modules.module


def load_state_dict_pre_hooks(L, log):
    outer = L.nn.Sequential(L.nn.Linear(2, 1))

    def public(module, state_dict, prefix, local_metadata, strict, missing, unexpected, errors):
        log.append(("public", type(module).__name__, prefix, strict, sorted(state_dict)))
        state_dict.pop(prefix + "extra", None)

    def private(state_dict, prefix, local_metadata, strict, missing, unexpected, errors):
        log.append(("private", prefix, len(missing), len(unexpected)))

    def private_with_module(module, state_dict, prefix, *rest):
        log.append(("private with module", type(module).__name__, prefix))

    outer[0].register_load_state_dict_pre_hook(public)
    h = outer[0]._register_load_state_dict_pre_hook(private)
    outer._register_load_state_dict_pre_hook(private_with_module, with_module=True)
    outer.register_load_state_dict_post_hook(lambda m, keys: log.append(("post", keys)))
    state = dict(outer.state_dict())
    state["0.extra"] = t(L, [1.0])
    log.append(repr(outer.load_state_dict(state)))  # the pre-hook removed the extra key
    h.remove()
    log.append(raised(lambda: outer.load_state_dict({"0.weight": state["0.weight"]})))


def registration_hooks(L, log):
    api = _module_api(L)

    def on_buffer(module, name, buffer):
        log.append(("buffer", type(module).__name__, name, buffer))
        return None if buffer is None else buffer * 2

    def on_module(module, name, sub):
        log.append(("module", type(module).__name__, name, type(sub).__name__))

    def on_param(module, name, param):
        log.append(("param", type(module).__name__, name, tuple(param.shape)))

    handles = [api.register_module_buffer_registration_hook(on_buffer),
               api.register_module_module_registration_hook(on_module),
               api.register_module_parameter_registration_hook(on_param)]
    try:
        box = L.nn.Module()
        box.register_buffer("count", t(L, [1.0]))
        box.count = t(L, [5.0])  # assigning an existing buffer registers it again
        box.lin = L.nn.Linear(1, 1)
        box.add_module("act", L.nn.ReLU())
        box.w = L.nn.Parameter(L.zeros(3))
        box.register_parameter("b", None)
        box.lin = None
        log += [box.count, sorted(box.state_dict())]
    finally:
        for h in handles:
            h.remove()
    box.register_buffer("quiet", t(L, [1.0]))
    log.append(box.quiet)


def legacy_backward_hooks(L, log):
    class MulAdd(L.nn.Module):
        def forward(self, x, y):
            return x * y + x

    m = MulAdd()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m.register_backward_hook(lambda mod, gi, go: log.append(("legacy", gi, go)))
        x = t(L, [2.0], requires_grad=True)
        y = t(L, [3.0], requires_grad=True)
        out = m(x, y)
    log.append([(w.category.__name__, str(w.message)[:60]) for w in caught])
    out.backward()
    log += [x.grad.clone(), y.grad.clone()]
    log.append(raised(lambda: m.register_full_backward_hook(lambda *a: None)))
    full = L.nn.Identity()
    full.register_full_backward_hook(lambda *a: None)
    log.append(raised(lambda: full.register_backward_hook(lambda *a: None)))
    m2 = MulAdd()
    m2.register_backward_hook(lambda mod, gi, go: (gi[0] * 10, gi[1]))
    x.grad = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        m2(x, y).backward()
    log.append(x.grad)


def legacy_backward_hook_warnings(L, log):
    class Pair(L.nn.Module):
        def forward(self, x):
            return x * 2, x * 3

    class Boxed(L.nn.Module):
        def forward(self, x):
            return {"out": x * 2}

    class Single(L.nn.Module):
        def forward(self, x):
            return (x * 2).exp()

    x = t(L, [1.0], requires_grad=True)
    for module in (Pair(), Boxed(), Single()):
        module.register_backward_hook(lambda mod, gi, go: log.append(("hook", len(gi))))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = module(x)
        log.append([str(w.message)[:70] for w in caught])
        first = out[0] if isinstance(out, tuple) else out["out"] if isinstance(out, dict) else out
        first.sum().backward()


def global_legacy_backward_hook(L, log):
    api = _module_api(L)
    seen = []
    handle = api.register_module_backward_hook(lambda m, gi, go: seen.append(type(m).__name__))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lin = L.nn.Sequential(L.nn.Tanh(), L.nn.Sigmoid())
            lin(t(L, [0.5], requires_grad=True)).sum().backward()
        log.append(raised(lambda: api.register_module_full_backward_hook(lambda *a: None)))
    finally:
        handle.remove()
    log.append(seen)


def forward_hook_flag_dicts(L, log):
    api = _module_api(L)
    m = L.nn.Identity()
    handles = [m.register_forward_hook(lambda *a: None, with_kwargs=True),
               m.register_forward_hook(lambda *a: None, always_call=True),
               m.register_forward_hook(lambda *a: None, with_kwargs=True, always_call=True),
               m.register_forward_pre_hook(lambda *a: None, with_kwargs=True),
               api.register_module_forward_hook(lambda *a: None, always_call=True)]

    def state():
        flags = (m._forward_hooks_with_kwargs, m._forward_hooks_always_called,
                 m._forward_pre_hooks_with_kwargs, api._global_forward_hooks_always_called)
        return ([len(f) for f in flags], [list(f.values()) for f in flags],
                set(m._forward_hooks_with_kwargs) <= set(m._forward_hooks))
    log.append(state())
    try:
        for h in handles[::2]:
            h.remove()
        log.append(state())
    finally:
        for h in handles:
            h.remove()
    log.append(state())


def full_backward_hooks_in_double_backward(L, log):
    class Cube(L.nn.Module):
        def forward(self, x):
            return x ** 3

    m = Cube()
    m.register_full_backward_hook(lambda mod, gi, go: log.append(("full", gi, go)))
    m.register_full_backward_pre_hook(lambda mod, go: log.append(("pre", go)))
    x = t(L, [1.0, 2.0], requires_grad=True)
    g, = L.autograd.grad(m(x).sum(), x, create_graph=True)
    log.append(("first", g))
    log.append(("second", L.autograd.grad(g.sum(), x)))


PROGRAMS = [
    load_state_dict_pre_hooks, registration_hooks, legacy_backward_hooks,
    legacy_backward_hook_warnings, global_legacy_backward_hook, forward_hook_flag_dicts,
    full_backward_hooks_in_double_backward,
]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_same_observations_as_pytorch(program):
    assert_same(program)
