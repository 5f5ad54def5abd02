"""``gradlog train``'s configuration: the flags, the ``--config`` TOML file and what a resumed
run recorded, merged and validated by one mechanism (typed ``Options`` dataclasses, as plugins
declare theirs: :func:`gradlog.plugin.options.check_values`).

Precedence: a flag, then the TOML ``[train]`` table, then the defaults (``Settings`` and the
example's own ``Options``). Plugins are enabled in order: the defaults, the TOML's
``[plugins.NAME]`` tables, then ``-p`` (options merge per key). The resolved configuration is a
:class:`RunConfig`; ``run.toml`` and every checkpoint record it, and ``--resume`` restores it.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from .. import storage
from ..plugin import Plugin
from ..plugin.discovery import instantiate, load, merge_plugins
from ..plugin.options import BadValue, check_values, did_you_mean, load_config, validate_options
from . import toml_text
from .errors import UserError

__all__ = ["DEFAULT_PLUGINS", "Settings", "TrainOptions", "Given", "RunConfig", "read_given",
           "resolve", "reconcile", "make_plugins", "recorded_plugins"]

DEFAULT_PLUGINS = ("nan-guard", "histogram", "grad-norm", "gradcam", "doctor", "graph")
RECORD_FORMAT, RECORD_VERSION = "gradlog-run", 1
_PLUGINS_NOTE = ("the plugins, in the order they were enabled (--resume enables them again in "
                 "this order);\n# each runs at its dispatch order: lower first, equal orders "
                 "in this list's order\n# ")
TABLES = ("train", "plugins")


@dataclass
class Settings:
    """The settings of every example: flags of these names, and keys of ``[train]``."""

    epochs: int = field(default=3, metadata={"help": "passes over the training data", "min": 1})
    batch_size: int = field(default=64, metadata={"help": "examples per optimizer step",
                                                  "min": 1})
    lr: float = field(default=0.05, metadata={"help": "learning rate", "min": 0,
                                              "min_open": True})
    seed: int = field(default=0, metadata={
        "help": "seeds initialization, shuffling and each plugin's own generator", "min": 0})


@dataclass
class TrainOptions:
    """What ``gradlog train`` was given (the CLI fills it in); ``None``: not given."""

    example: str | None = None
    logdir: str | None = None
    epochs: int | None = None
    batch_size: int | None = None
    lr: float | None = None
    seed: int | None = None
    plugins: tuple = ()
    default_plugins: bool | None = None
    graph: bool | None = None  # False: not the default graph plugin (--no-graph)
    config_file: str | None = None
    strict_plugins: bool | None = None
    resume: str | None = None
    quiet: bool = False
    extra: dict = field(default_factory=dict)  # more [train] settings, e.g. train_size
    nproc: int = 1  # processes to train on (data-parallel; see gradlog.train.launch)


@dataclass
class Given:
    """What one command gave: each setting with the label that names where it came from
    (``--lr``, ``lr in [train] of a.toml``), and the plugins' raw inputs."""

    settings: dict[str, tuple[Any, str]]
    example: str | None
    plugin_specs: tuple
    file: dict
    default_plugins: bool | None
    strict_plugins: bool | None
    config_file: str | None
    graph: bool | None = None

    def plugins(self, defaults: tuple = ()) -> list[tuple[str, dict, Any]]:
        if self.graph is False:
            defaults = tuple(name for name in defaults if name != "graph")
        return merge_plugins(self.plugin_specs, defaults=defaults, config=self.file)


@dataclass
class RunConfig:
    """A run's whole resolved configuration (what ``run.toml`` and each checkpoint hold)."""

    example: str                       # a built-in example's name, or a FILE.py's full path
    settings: dict                     # [train], resolved: Settings and the example's Options
    plugins: list[tuple[str, dict]]    # in enabling order, with their resolved options
    default_plugins: bool = True
    strict_plugins: bool = False
    config_file: str | None = None     # where the TOML came from (for the reader)
    example_digest: str | None = None  # a FILE.py's SHA-256 when the run started

    @property
    def epochs(self) -> int:
        return int(self.settings["epochs"])

    def to_record(self) -> dict:
        run = {"format": RECORD_FORMAT, "version": RECORD_VERSION, "example": self.example,
               "default_plugins": self.default_plugins, "strict_plugins": self.strict_plugins}
        if self.config_file:
            run["config_file"] = self.config_file
        if self.example_digest:
            run["example_sha256"] = self.example_digest
        return {"run": run, "train": dict(self.settings),
                "plugins": {name: dict(opts) for name, opts in self.plugins}}

    @classmethod
    def from_record(cls, record: Any, where: str) -> RunConfig:
        """The configuration in ``record`` (a parsed ``run.toml`` or a checkpoint's); raises
        ``ValueError`` naming ``where`` if it is not one."""
        try:
            run, train, plugins = record["run"], record["train"], record["plugins"]
            if run.get("format") != RECORD_FORMAT or run.get("version") != RECORD_VERSION:
                raise ValueError(f"not a gradlog run configuration (format "
                                 f"{run.get('format')!r}, version {run.get('version')!r})")
            return cls(str(run["example"]), dict(train),
                       [(str(n), dict(o)) for n, o in plugins.items()],
                       bool(run["default_plugins"]), bool(run["strict_plugins"]),
                       run.get("config_file"), run.get("example_sha256"))
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ValueError(f"{where}: not a gradlog run configuration ({exc})") from None

    def to_toml(self, orders: dict[str, int]) -> str:
        """``run.toml``: the record as TOML, the plugins in their enabling order, each table
        after a comment with its dispatch order."""
        record = self.to_record()
        tables = [(("run",), record["run"], "gradlog train's configuration of this run: "
                   "`gradlog train --resume DIR` restores it"),
                  (("train",), record["train"], "")]
        tables += [(("plugins", name), opts, (_PLUGINS_NOTE if i == 0 else "")
                    + f"runs at order {orders.get(name, '?')}")
                   for i, (name, opts) in enumerate(record["plugins"].items())]
        return toml_text.dumps(tables)


# -- what a command gave -------------------------------------------------------------------
def read_given(options: TrainOptions) -> Given:
    """The settings, example and plugins one command gave, from its flags and its TOML."""
    _check_run_dirs(options)
    file = load_config(options.config_file) if options.config_file else {}
    where = options.config_file
    for name, table in file.items():
        if name == "train" and not isinstance(table, dict):
            raise UserError(f"the config's [train] entry must be a table (in {where})")
        if name not in TABLES:
            what = f"table [{name}]" if isinstance(table, dict) else f"key '{name}'"
            raise UserError(f"unknown {what} in {where};{did_you_mean(name, TABLES)} known "
                            "tables: [train], [plugins.NAME]")
    settings: dict[str, tuple[Any, str]] = {}
    for key, value in file.get("train", {}).items():
        settings[key] = (value, f"{key} in [train] of {where}")
    for key, value in options.extra.items():
        settings[key] = (value, f"'{key}'")
    for f in dataclasses.fields(Settings):
        value = getattr(options, f.name)
        if value is not None:
            settings[f.name] = (value, "--" + f.name.replace("_", "-"))
    return Given(settings, options.example, tuple(options.plugins), file,
                 options.default_plugins, options.strict_plugins,
                 os.path.abspath(options.config_file) if options.config_file else None,
                 options.graph)


def _check_run_dirs(options: TrainOptions) -> None:
    """``--logdir`` and ``--resume`` name a directory that outlives the process."""
    for flag, value in (("--logdir", options.logdir), ("--resume", options.resume)):
        if value is None:
            continue
        if not value.strip():
            default = " (leave --logdir out for the default runs/<time>_<host>)" \
                if flag == "--logdir" else ""
            raise UserError(f"{flag} is empty: give a directory or a URL{default}")
        if storage.process_local(value):
            raise UserError(f"{flag} {value}: a {value.split(':', 1)[0]}:// filesystem lives "
                            "in this process only, and what gradlog train writes there is "
                            "gone when it exits; give a directory or a URL such as "
                            "s3://bucket/exp/run1")


def _checked(given: dict[str, tuple[Any, str]], example_options: Any,
             example: str) -> dict[str, tuple[Any, str]]:
    """Each given setting validated by its dataclass (Settings or the example's Options)."""
    classes = [Settings] + ([example_options] if example_options is not None else [])
    owner = {f.name: cls for cls in classes for f in dataclasses.fields(cls)}
    checked = {}
    for key, (value, label) in given.items():
        cls = owner.get(key)
        if cls is None:
            hint = "" if example_options is not None else \
                f" ({example} declares no Options of its own)"
            raise UserError(f"unknown setting {label};{did_you_mean(key, owner)} known "
                            f"settings: {', '.join(owner)}{hint}")
        try:
            checked[key] = (check_values(cls, {key: value})[key], label)
        except BadValue as exc:
            raise UserError(f"bad value {exc.value!r} for {label} ({exc.type_name}): "
                            f"{exc.problem}") from None
    return checked


def resolve(given: Given, example: str, example_options: Any, digest: str | None = None
            ) -> tuple[RunConfig, list[Plugin]]:
    """A new run's configuration from what the command gave, and its plugins (made first:
    a mistake in ``-p`` is found before any data is built)."""
    values = {key: value for key, (value, _) in
              _checked(given.settings, example_options, example).items()}
    settings = dataclasses.asdict(Settings(**{k: v for k, v in values.items()
                                              if k in _names(Settings)}))
    if example_options is not None:
        settings.update(dataclasses.asdict(example_options(
            **{k: v for k, v in values.items() if k in _names(example_options)})))
    default_plugins = given.default_plugins is not False
    plugins = instantiate(given.plugins(DEFAULT_PLUGINS if default_plugins else ()))
    return RunConfig(example, settings, recorded_plugins(plugins), default_plugins,
                     bool(given.strict_plugins), given.config_file, digest), plugins


def recorded_plugins(plugins: list[Plugin]) -> list[tuple[str, dict]]:
    """Each plugin's resolved options as ``run.toml`` can hold them: a ``none`` value is left
    out when it is the default, and written as the string "none" (what ``-p key=none`` gives)
    when it is not."""
    out = []
    for plugin in plugins:
        opts = {}
        if plugin.options is not None:
            defaults = {f.name: f.default for f in dataclasses.fields(plugin.options)}
            for key, value in vars(plugin.options).items():
                if value is None and defaults.get(key) is None:
                    continue
                opts[key] = "none" if value is None else \
                    list(value) if isinstance(value, tuple) else value
                try:
                    toml_text.value(opts[key])
                except TypeError:
                    raise UserError(f"plugin '{plugin.name}': option {key} = {value!r} cannot "
                                    "be recorded in run.toml (TOML has no such value)") from None
        out.append((plugin.name, opts))
    return out


def _names(cls: Any) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


# -- a resumed run ---------------------------------------------------------------------------
def reconcile(recorded: RunConfig, given: Given, example_options: Any, run_dir: str,
              same_example: bool) -> RunConfig:
    """The recorded configuration, checked against what this command gave again: the same
    value is fine, a larger ``--epochs`` extends the run, anything else is a UserError naming
    the key, the recorded and the given value."""
    differ: list[tuple[str, Any, Any]] = []
    if not same_example:
        differ.append(("the example", recorded.example, given.example))
    settings = dict(recorded.settings)
    for key, (value, label) in _checked(given.settings, example_options,
                                        recorded.example).items():
        old = recorded.settings.get(key)
        if key == "epochs" and value >= old:
            settings[key] = value
        elif value != old:
            differ.append((f"{key} ({label})", old, value))
    if given.default_plugins is False and recorded.default_plugins:
        differ.append(("the default plugins (--no-default-plugins)", "enabled", "disabled"))
    if given.strict_plugins and not recorded.strict_plugins:
        differ.append(("--strict-plugins", False, True))
    differ += _plugin_differences(recorded.plugins, given.plugins())
    if differ:
        key, old, new = differ[0]
        more = f" (and {len(differ) - 1} more)" if len(differ) > 1 else ""
        raise UserError(f"cannot resume {run_dir}: {key} was recorded as {old!r}, given "
                        f"{new!r}{more}; a resumed run keeps its configuration, only --epochs "
                        "may be raised")
    return dataclasses.replace(recorded, settings=settings)


def _plugin_differences(recorded: list[tuple[str, dict]],
                        given: list[tuple[str, dict, Any]]) -> list[tuple[str, Any, Any]]:
    kept = dict(recorded)
    differ = []
    for name, opts, obj in given:
        if name not in kept:
            differ.append((f"plugin '{name}'", "not enabled", "enabled"))
            continue
        cls = type(obj) if isinstance(obj, Plugin) else obj or load(name)
        old = validate_options(name, cls.Options, kept[name])
        new = obj.options if isinstance(obj, Plugin) else validate_options(name, cls.Options,
                                                                          opts)
        for key in (vars(old) if old is not None else {}):
            if getattr(old, key) != getattr(new, key):
                differ.append((f"{name}:{key}", getattr(old, key), getattr(new, key)))
    return differ


def make_plugins(config: RunConfig, given: Given) -> list[Plugin]:
    """A resumed run's plugins from its recorded options; those given again as Python objects
    (``TrainOptions.plugins``) are used as they are."""
    objects = {name: obj for name, _, obj in given.plugins() if obj is not None}
    return instantiate([(name, {} if isinstance(objects.get(name), Plugin) else opts,
                         objects.get(name)) for name, opts in config.plugins])
