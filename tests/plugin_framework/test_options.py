"""The -p grammar, TOML values, option validation and how enabled plugins merge."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pytest

from gradlog.plugin import Plugin, PluginConfigError, parse_spec, resolve_plugins
from gradlog.plugin.options import parse_value, validate_options


@pytest.mark.parametrize("spec, expected", [
    ("histogram", ("histogram", {})),
    ("grad-clip:max_norm=1.0", ("grad-clip", {"max_norm": 1.0})),
    ("gradcam:layer=3", ("gradcam", {"layer": 3})),
    ("adversarial:mode=pgd,eps=0.1,steps=7", ("adversarial", {"mode": "pgd", "eps": 0.1,
                                                              "steps": 7})),
    ('histogram:include=["fc*","conv*"],every=5',
     ("histogram", {"include": ["fc*", "conv*"], "every": 5})),
    ('x:name="a,b",flag=true', ("x", {"name": "a,b", "flag": True})),
    ("x:path=runs/exp1", ("x", {"path": "runs/exp1"})),
    ("x:v=-inf", ("x", {"v": float("-inf")})),
])
def test_spec_grammar(spec, expected):
    assert parse_spec(spec) == expected


@pytest.mark.parametrize("spec, fragment", [
    ("grad-clip:max_norm", "expected key=value"),
    (":x=1", "not a plugin name"),
    ("a:b=[1,2", "unclosed bracket"),
    ('a:b="x', "unclosed quote"),
    ("a:", "nothing after ':'"),
    ("a:x=1,x=2", "given twice"),
    ("", "empty plugin specification"),
    ("a:b=1]", "unbalanced"),
])
def test_malformed_specs_name_the_problem(spec, fragment):
    with pytest.raises(PluginConfigError, match=fragment.replace("[", r"\[")):
        parse_spec(spec)


def test_values_are_toml_literals_or_bare_strings():
    assert parse_value("1") == 1 and isinstance(parse_value("1"), int)
    assert parse_value("1.5") == 1.5
    assert parse_value("true") is True
    assert parse_value('"quoted"') == "quoted"
    assert parse_value("bare-word") == "bare-word"
    assert parse_value("[1, 2]") == [1, 2]


@dataclass
class Opts:
    every: int = field(default=10, metadata={"help": "cadence", "min": 1})
    scale: float = 1.0
    mode: Literal["a", "b"] = "a"
    include: list[str] = field(default_factory=list)
    name: str | None = None


def test_validation_coerces_and_checks():
    o = validate_options("p", Opts, {"every": 3, "scale": 2, "mode": "b", "include": "fc*"})
    assert (o.every, o.scale, o.mode, o.include) == (3, 2.0, "b", ["fc*"])
    assert isinstance(o.scale, float)


@pytest.mark.parametrize("given, fragment", [
    ({"evry": 3}, "has no option 'evry'; did you mean 'every'\\? its options are: every, scale, "
                  "mode, include, name"),
    ({"every": 0}, "bad value 0 for option 'every'.*must be >= 1"),
    ({"every": 1.5}, "bad value 1.5 for option 'every' \\(int\\).*integer"),
    ({"every": True}, "bad value True"),
    ({"mode": "c"}, "must be one of 'a', 'b'"),
    ({"scale": "big"}, "bad value 'big' for option 'scale' \\(float\\)"),
])
def test_bad_options_name_plugin_key_and_accepted_values(given, fragment):
    with pytest.raises(PluginConfigError, match=f"plugin 'p'.*{fragment}"):
        validate_options("p", Opts, given)


@dataclass
class Bounded:
    rate: float = field(default=0.5, metadata={"min": 0, "max": 1})
    scale: float = 1.0  # no bounds
    above: float = field(default=float("inf"), metadata={"min": 0, "infinite": True})


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", float("nan"), float("inf")])
def test_a_bounded_number_refuses_non_finite_values(value):
    with pytest.raises(PluginConfigError, match=f"bad value {value!r} for option 'rate' "
                                                "\\(float\\): must be a finite number"):
        validate_options("p", Bounded, {"rate": value})


def test_an_unbounded_number_takes_any_float_and_a_field_may_give_inf_a_meaning():
    assert validate_options("p", Bounded, {"scale": "inf"}).scale == float("inf")
    assert validate_options("p", Bounded, {"above": "inf"}).above == float("inf")
    with pytest.raises(PluginConfigError, match="bad value 'nan' for option 'above'"):
        validate_options("p", Bounded, {"above": "nan"})


class A(Plugin):
    name = "a"
    Options = Opts


class B(Plugin):
    name = "b"


def test_instantiating_a_plugin_validates_its_options():
    assert A(every=4).options.every == 4
    with pytest.raises(PluginConfigError, match="no option"):
        A(foo=1)
    with pytest.raises(PluginConfigError, match="takes no options"):
        B(x=1)


def test_enabling_order_and_per_key_merge(monkeypatch):
    import gradlog.plugin.discovery as discovery
    monkeypatch.setattr(discovery, "load", lambda name, found=None: {"a": A, "b": B}[name])
    monkeypatch.setattr(discovery, "discover", lambda: [])
    plugins = resolve_plugins(["a:every=5"], defaults=["b", "a"],
                              config={"plugins": {"a": {"every": 2, "scale": 3.0}}})
    assert [p.name for p in plugins] == ["b", "a"]
    assert (plugins[1].options.every, plugins[1].options.scale) == (5, 3.0)
    with pytest.raises(PluginConfigError, match="enabled twice"):
        resolve_plugins(["a", "a:every=3"])


def test_unknown_plugin_lists_installed_ones():
    with pytest.raises(PluginConfigError, match="unknown plugin 'nope'; installed plugins: "):
        resolve_plugins(["nope"])
