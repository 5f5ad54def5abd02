"""Random numbers: gl.manual_seed, gl.Generator (seeding, get_state/set_state), and the
generator= argument of every random function."""

import numpy as np
import pytest

import gradlog as gl

RANDOM_FUNCTIONS = {
    "rand": lambda g: gl.rand(2, 3, generator=g),
    "randn": lambda g: gl.randn((2, 3), generator=g),
    "randint": lambda g: gl.randint(0, 100, (5,), generator=g),
    "randint_high_only": lambda g: gl.randint(100, (5,), generator=g),
    "rand_like": lambda g: gl.rand_like(gl.zeros(4), generator=g),
    "randn_like": lambda g: gl.randn_like(gl.zeros(4, dtype=gl.float64), generator=g),
    "randint_like": lambda g: gl.randint_like(gl.zeros(4), 10, generator=g),
    "randperm": lambda g: gl.randperm(10, generator=g),
    "normal": lambda g: gl.normal(1.0, 2.0, (3,), generator=g),
    "uniform_": lambda g: gl.zeros(4).uniform_(-1, 1, generator=g),
    "normal_": lambda g: gl.zeros(4).normal_(0, 3, generator=g),
    "bernoulli_": lambda g: gl.zeros(8).bernoulli_(0.5, generator=g),
}


@pytest.mark.parametrize("name", RANDOM_FUNCTIONS)
def test_generator_argument_makes_draws_reproducible(name):
    draw = RANDOM_FUNCTIONS[name]
    a = draw(gl.Generator().manual_seed(3))
    b = draw(gl.Generator().manual_seed(3))
    c = draw(gl.Generator().manual_seed(4))
    assert np.array_equal(a.numpy(), b.numpy())
    assert not np.array_equal(a.numpy(), c.numpy())


@pytest.mark.parametrize("name", RANDOM_FUNCTIONS)
def test_a_generator_does_not_touch_the_default_stream(name):
    gl.manual_seed(0)
    expected = gl.rand(3)
    gl.manual_seed(0)
    RANDOM_FUNCTIONS[name](gl.Generator().manual_seed(1))
    assert np.array_equal(gl.rand(3).numpy(), expected.numpy())


def test_manual_seed_makes_the_default_stream_reproducible():
    gl.manual_seed(123)
    a = (gl.randn(3), gl.rand(2), gl.randint(0, 9, (4,)))
    gl.manual_seed(123)
    b = (gl.randn(3), gl.rand(2), gl.randint(0, 9, (4,)))
    for x, y in zip(a, b):
        assert np.array_equal(x.numpy(), y.numpy())
    assert gl.initial_seed() == 123


def test_get_state_and_set_state_reproduce_a_stream():
    g = gl.Generator().manual_seed(7)
    gl.randn(5, generator=g)
    state = g.get_state()
    assert state.dtype == gl.uint8
    first = gl.randn(4, generator=g)
    gl.rand(10, generator=g)
    g.set_state(state)
    assert np.array_equal(gl.randn(4, generator=g).numpy(), first.numpy())
    other = gl.Generator().set_state(state)
    assert np.array_equal(gl.randn(4, generator=other).numpy(), first.numpy())


def test_default_rng_state_round_trip():
    state = gl.get_rng_state()
    a = gl.randn(3)
    gl.set_rng_state(state)
    assert np.array_equal(gl.randn(3).numpy(), a.numpy())


def test_generator_api():
    g = gl.Generator()
    assert g.manual_seed(5) is g and g.initial_seed() == 5 and g.device == "cpu"
    assert isinstance(g.seed(), int)
    with pytest.raises(RuntimeError):
        g.set_state(gl.zeros(3, dtype=gl.uint8))
    with pytest.raises(TypeError):
        gl.rand(2, generator=np.random.default_rng(0))


def test_dtypes_and_ranges_of_random_functions():
    g = gl.Generator().manual_seed(0)
    assert gl.rand(3, generator=g).dtype == gl.float32
    assert gl.randn(3, dtype=gl.float64, generator=g).dtype == gl.float64
    ints = gl.randint(2, 5, (200,), generator=g)
    assert ints.dtype == gl.int64 and set(ints.tolist()) == {2, 3, 4}
    u = gl.rand(1000, generator=g).numpy()
    assert u.min() >= 0 and u.max() < 1
    assert sorted(gl.randperm(6, generator=g).tolist()) == list(range(6))
    assert set(gl.zeros(50).bernoulli_(0.5, generator=g).tolist()) == {0.0, 1.0}
