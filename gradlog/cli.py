"""The ``gradlog`` command line (click). Each command's docstring is its ``--help`` text."""

from __future__ import annotations

import sys

import click

from .plugin.errors import PluginConfigError
from .plugin.options import parse_spec


def _check_specs(ctx: click.Context, param: click.Parameter, value: tuple) -> tuple:
    for spec in value:
        try:
            parse_spec(spec)
        except PluginConfigError as exc:
            raise click.BadParameter(str(exc)) from None
    return value


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gradlog")
def main() -> None:
    """gradlog: train with hook-driven plugins and log everything to TensorBoard."""


@main.command()
@click.argument("example", default="shapes")
@click.option("--logdir", type=click.Path(file_okay=False), default=None,
              help="The run directory (default: runs/<Mon DD_HH-MM-SS>_<host>).")
@click.option("--epochs", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--lr", type=click.FloatRange(min=0, min_open=True), default=0.05,
              show_default=True, help="Learning rate.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("-p", "--plugin", "plugins", multiple=True, callback=_check_specs,
              metavar="NAME[:key=value,...]", help="Enable a plugin (repeatable).")
@click.option("--no-default-plugins", is_flag=True,
              help="Do not enable nan-guard, histogram, grad-norm and gradcam.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="A TOML file: [train] settings and [plugins.NAME] tables.")
@click.option("--strict-plugins", is_flag=True, help="Make every plugin error fatal.")
@click.option("--resume", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="Continue the run in DIR from its newest checkpoint.")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
def train(example: str, logdir: str | None, epochs: int, batch_size: int, lr: float, seed: int,
          plugins: tuple, no_default_plugins: bool, config_file: str | None,
          strict_plugins: bool, resume: str | None, quiet: bool) -> None:
    """Train EXAMPLE and log to TensorBoard.

    EXAMPLE is a built-in example (shapes, the default; shapes-mlp) or a Python file that
    defines build(config) returning the model, optimizer, loss function and data loaders.
    """
    from .train import TrainOptions
    from .train import train as run_training
    options = TrainOptions(example=example, logdir=logdir, epochs=epochs, batch_size=batch_size,
                           lr=lr, seed=seed, plugins=plugins,
                           default_plugins=not no_default_plugins, config_file=config_file,
                           strict_plugins=strict_plugins, resume=resume, quiet=quiet)
    sys.exit(run_training(options))


@main.group()
def plugins() -> None:
    """List, inspect and create plugins."""


@plugins.command("list")
def plugins_list() -> None:
    """Installed plugins: name, distribution, version, kind and status."""
    from .plugin.discovery import discover, inspect_plugin
    from .train import DEFAULT_PLUGINS
    rows = [("NAME", "DISTRIBUTION", "VERSION", "KIND", "STATUS")]
    for info in discover():
        found = inspect_plugin(info)
        if found["error"]:
            kind, status = "?", f"broken: {found['error']}"
        else:
            kind = found["cls"].kind
            status = "enabled by default" if info.name in DEFAULT_PLUGINS else "available"
        rows.append((info.name, info.distribution, info.version, kind, status))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4])


@plugins.command("show")
@click.argument("name")
def plugins_show(name: str) -> None:
    """A plugin's description, kind, order and options."""
    from .plugin.discovery import discover, load
    from .plugin.errors import PluginLoadError
    from .plugin.options import describe_options
    try:
        cls = load(name, discover())
    except PluginConfigError as exc:
        raise click.UsageError(str(exc)) from None
    except PluginLoadError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    click.echo(f"{cls.name} ({cls.kind}, order {cls.order})\n")
    click.echo((cls.__doc__ or "").strip() + "\n")
    options = describe_options(cls.Options)
    if not options:
        click.echo("options: none")
    else:
        click.echo("options:")
        for o in options:
            bounds = ""
            if o["min"] is not None or o["max"] is not None:
                bounds = f" [{o['min'] if o['min'] is not None else ''}..." \
                         f"{o['max'] if o['max'] is not None else ''}]"
            click.echo(f"  {o['name']} ({o['type']}{bounds}, default {o['default']!r})")
            if o["help"]:
                click.echo(f"      {o['help']}")
    touches = getattr(cls, "touches", None)
    if touches:
        click.echo(f"\nregistries it touches: {', '.join(touches)}")


if __name__ == "__main__":
    main()
