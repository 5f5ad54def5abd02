"""The configuration of ``gradlog train`` as units: the TOML writer round-trips every value a
TOML file or ``-p`` can hold, ``run.toml`` reads back into the same configuration, a plugin's
options are recorded so that restoring them gives the same plugin, and resuming reconciles what
was given again with what was recorded (the same value, a larger ``--epochs``, or an error
naming key, recorded and given value)."""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field, replace

import pytest

from gradlog.plugin import Plugin
from gradlog.train import UserError, toml_text
from gradlog.train.config import (
    RunConfig,
    TrainOptions,
    read_given,
    reconcile,
    recorded_plugins,
    resolve,
)


@pytest.mark.parametrize("value", [
    True, False, 0, -3, 2 ** 40, 0.1, -1e-300, 1e300, "plain", 'with "quotes" and \\',
    "tabs\tnew\nlines", "ünïcode ✓", "", [], [1, 2], ["fc*", "conv*"], [[1.5], [2.5, "x"]],
    {"a": 1, "b c": [True]}, {},
])
def test_toml_values_round_trip(value):
    assert tomllib.loads(f"v = {toml_text.value(value)}")["v"] == value


def test_toml_infinities_and_nan_round_trip():
    assert tomllib.loads(f"v = {toml_text.value(math.inf)}")["v"] == math.inf
    assert tomllib.loads(f"v = {toml_text.value(-math.inf)}")["v"] == -math.inf
    assert math.isnan(tomllib.loads(f"v = {toml_text.value(math.nan)}")["v"])


def test_toml_refuses_what_it_cannot_hold():
    with pytest.raises(TypeError, match="cannot be a NoneType"):
        toml_text.value(None)


def test_tables_with_dotted_and_odd_names():
    text = toml_text.dumps([(("run",), {"a": 1}, "a comment"),
                            (("plugins", "my.plugin"), {"k": "v"}, ""),
                            (("plugins", "grad-clip"), {}, "order 10")])
    assert text.startswith("# a comment\n[run]\na = 1\n")
    assert tomllib.loads(text) == {"run": {"a": 1},
                                   "plugins": {"my.plugin": {"k": "v"}, "grad-clip": {}}}


def _config(**settings) -> RunConfig:
    return RunConfig("shapes", {"epochs": 2, "batch_size": 64, "lr": 0.1, "seed": 0,
                                "train_size": 256, **settings},
                     [("nan-guard", {}), ("grad-clip", {"max_norm": 0.1, "mode": "norm"})])


def test_run_toml_reads_back_into_the_same_configuration():
    config = replace(_config(), config_file="/x/tiny.toml", strict_plugins=True)
    text = config.to_toml({"nan-guard": 0, "grad-clip": 10})
    assert "# runs at order 10\n[plugins.grad-clip]\nmax_norm = 0.1\n" in text
    assert RunConfig.from_record(tomllib.loads(text), "run.toml") == config
    assert RunConfig.from_record(config.to_record(), "checkpoint") == config


def test_run_toml_lists_the_plugins_in_enabling_order_and_says_so():
    config = RunConfig("shapes", {"epochs": 1}, [("histogram", {}), ("grad-clip", {}),
                                                 ("nan-guard", {})])
    text = config.to_toml({"histogram": 100, "grad-clip": 10, "nan-guard": 0})
    tables = [line for line in text.splitlines() if line.startswith("[plugins.")]
    assert tables == ["[plugins.histogram]", "[plugins.grad-clip]", "[plugins.nan-guard]"]
    assert text.count("in the order they were enabled") == 1
    assert "# runs at order 100\n[plugins.histogram]" in text
    assert [p for p, _ in RunConfig.from_record(tomllib.loads(text), "run.toml").plugins] == [
        "histogram", "grad-clip", "nan-guard"]


@pytest.mark.parametrize("record, says", [
    ({"train": {}, "plugins": {}}, "'run'"),
    ({"run": {"format": "other", "version": 1}, "train": {}, "plugins": {}}, "format 'other'"),
    ({"run": {"format": "gradlog-run", "version": 9}, "train": {}, "plugins": {}},
     "version 9"),
    ("not a table", "string indices"),
])
def test_a_record_that_is_not_a_run_configuration_is_refused(record, says):
    with pytest.raises(ValueError, match=f"where: not a gradlog run configuration.*{says}"):
        RunConfig.from_record(record, "where")


@dataclass
class NoneOptions:
    keep: float | None = None
    unset: float | None = field(default=1.0)
    names: tuple[str, ...] = ("a", "b")


class WithNone(Plugin):
    name = "with-none"
    Options = NoneOptions


def test_recorded_options_give_the_same_plugin_back():
    plugin = WithNone(unset=None)
    ((name, opts),) = recorded_plugins([plugin])
    assert (name, opts) == ("with-none", {"unset": "none", "names": ["a", "b"]})
    tomllib.loads(toml_text.value(opts).join(["v = ", ""]))  # valid TOML
    assert WithNone(**opts).options == plugin.options


def _given(**options):
    return read_given(TrainOptions(**options))


def test_resolve_takes_flags_over_the_toml_over_the_defaults(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[train]\nepochs = 5\nlr = 0.2\ntrain_size = 64\n[plugins.grad-clip]\n"
                    "max_norm = 0.3\n")
    from gradlog.examples.shapes import Options
    config, plugins = resolve(_given(config_file=str(path), epochs=7, plugins=("lr-monitor",)),
                              "shapes", Options)
    assert config.settings == {"epochs": 7, "batch_size": 64, "lr": 0.2, "seed": 0,
                               "train_size": 64, "val_size": 1000, "image_size": 32,
                               "two_object_size": 200}
    assert [p.name for p in plugins] == ["nan-guard", "histogram", "grad-norm", "gradcam", "doctor",
                                         "graph", "grad-clip", "lr-monitor"]
    assert dict(config.plugins)["grad-clip"]["max_norm"] == 0.3
    assert config.config_file == str(path)


@dataclass
class OwnDefaults:
    """An example's Options that declares its own defaults for two common settings."""

    lr: float = field(default=3e-3, metadata={"min": 0, "min_open": True})
    epochs: int = field(default=2, metadata={"min": 1})
    width: int = 8


def test_an_examples_options_set_its_own_defaults_for_the_common_settings(tmp_path):
    config, _ = resolve(_given(default_plugins=False), "own.py", OwnDefaults)
    assert config.settings == {"epochs": 2, "batch_size": 64, "lr": 3e-3, "seed": 0,
                               "width": 8}
    config, _ = resolve(_given(default_plugins=False, lr=0.1), "own.py", OwnDefaults)
    assert (config.settings["lr"], config.settings["epochs"]) == (0.1, 2)
    path = tmp_path / "c.toml"
    path.write_text("[train]\nlr = 0.01\nepochs = 4\n")
    config, _ = resolve(_given(default_plugins=False, config_file=str(path), epochs=5),
                        "own.py", OwnDefaults)
    assert (config.settings["lr"], config.settings["epochs"]) == (0.01, 5)
    with pytest.raises(UserError, match=r"bad value 0\.0 for --lr"):
        resolve(_given(default_plugins=False, lr=0.0), "own.py", OwnDefaults)


def test_reconcile_keeps_the_record_and_lets_epochs_grow():
    recorded = _config()
    assert reconcile(recorded, _given(lr=0.1, batch_size=64), None, "d", True) == recorded
    grown = reconcile(recorded, _given(epochs=5), None, "d", True)
    assert grown.epochs == 5 and grown.plugins == recorded.plugins
    with pytest.raises(UserError) as caught:
        reconcile(recorded, _given(lr=0.3, seed=2), None, "runs/a", True)
    assert str(caught.value) == ("cannot resume runs/a: lr (--lr) was recorded as 0.1, given "
                                 "0.3 (and 1 more); a resumed run keeps its configuration, "
                                 "only --epochs may be raised")


def test_reconcile_validates_a_value_given_again_like_any_other():
    with pytest.raises(UserError, match=r"bad value 0\.0 for --lr \(float\): must be > 0"):
        reconcile(_config(), _given(lr=0.0), None, "d", True)


def test_reconcile_compares_a_plugins_resolved_options():
    recorded = _config()
    same = reconcile(recorded, _given(plugins=("grad-clip:max_norm=0.1,mode=norm",)), None, "d",
                     True)
    assert same == recorded
    with pytest.raises(UserError, match="grad-clip:max_norm was recorded as 0.1, given 1.0"):
        reconcile(recorded, _given(plugins=("grad-clip",)), None, "d", True)  # the default
