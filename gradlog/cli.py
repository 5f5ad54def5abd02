"""The ``gradlog`` command line (click). Each command's docstring is its ``--help`` text.

User errors exit with status 2 and one line on stderr (``error: ...``), never a traceback.
"""

from __future__ import annotations

import errno
import os
import sys
import textwrap
from typing import Any

import click

from . import starting
from .plugin.errors import PluginConfigError
from .plugin.options import parse_spec
from .train.config import Settings
from .train.errors import UserError

# click >= 8.2 raises this for a group called without a subcommand (it shows the help)
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


class _Main(click.Group):
    """click's group, except that every error is reported on one line."""

    def main(self, args: Any = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             **extra: Any) -> Any:
        starting.uninstall()  # from here on, click's and gradlog train's own handling
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, False, **extra)
        except _NO_ARGS_IS_HELP as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            hint = ""
            if isinstance(exc, click.UsageError) and exc.ctx is not None:
                hint = f" (see '{exc.ctx.command_path} --help')"
            click.echo(f"error: {exc.format_message()}{hint}", err=True)
            sys.exit(exc.exit_code)
        except UserError as exc:
            click.echo(f"error: {exc}", err=True)
            if exc.detail:
                click.echo(exc.detail.rstrip("\n"), err=True)
            sys.exit(exc.exit_code)
        except click.Abort:  # Ctrl-C (click turns KeyboardInterrupt into Abort)
            click.echo(starting.interrupted_line(sys.argv[1:] if args is None else list(args)),
                       err=True)
            sys.exit(130)
        except OSError as exc:  # e.g. `gradlog inspect runs | head`: the reader went away
            if exc.errno != errno.EPIPE:
                raise
            sys.stdout = click.utils.PacifyFlushWrapper(sys.stdout)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


def _check_specs(ctx: click.Context, param: click.Parameter, value: tuple) -> tuple:
    for spec in value:
        try:
            parse_spec(spec)
        except PluginConfigError as exc:
            raise click.BadParameter(str(exc)) from None
    return value


@click.group("gradlog", cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gradlog")
def main() -> None:
    """gradlog: train with hook-driven plugins and log everything to TensorBoard.

    \b
    gradlog train                      train the built-in example, log to runs/
    gradlog train -p grad-clip:max_norm=1.0
    gradlog plugins list               installed plugins, their kind and status
    gradlog plugins new my-plugin      start a plugin package
    gradlog inspect runs/              what a log directory holds
    gradlog doctor runs/exp1           what is wrong with a run, where, since when
    gradlog sync SPOOL URL             upload what a run could not
    """


@main.command()
@click.argument("example", required=False)
@click.option("--logdir", type=click.Path(file_okay=False), default=None,
              help="The run directory, a path or a URL such as s3://bucket/exp/run1 "
                   "(default: runs/<Mon DD_HH-MM-SS>_<host>).")
@click.option("--epochs", type=int, default=None,
              help=f"Passes over the training data (default {Settings.epochs}).")
@click.option("--batch-size", type=int, default=None,
              help=f"Examples per optimizer step (default {Settings.batch_size}).")
@click.option("--lr", type=float, default=None,
              help=f"Learning rate (default {Settings.lr}).")
@click.option("--seed", type=int, default=None,
              help="Seeds initialization, shuffling and each plugin's own generator "
                   f"(default {Settings.seed}).")
@click.option("-p", "--plugin", "plugins", multiple=True, callback=_check_specs,
              metavar="NAME[:key=value,...]", help="Enable a plugin (repeatable).")
@click.option("--no-default-plugins", "no_default_plugins", is_flag=True, default=None,
              help="Do not enable nan-guard, histogram, grad-norm, gradcam, doctor and graph.")
@click.option("--no-graph", "no_graph", is_flag=True, default=None,
              help="Do not log the model's graph (the default graph plugin) for the Graphs "
                   "tab.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="A TOML file: [train] settings and [plugins.NAME] tables.")
@click.option("--strict-plugins", is_flag=True, default=None,
              help="Make every plugin error fatal.")
@click.option("--resume", type=click.Path(file_okay=False), default=None, metavar="DIR|URL",
              help="Continue the run in DIR with its recorded configuration (flags given "
                   "again must match it; --epochs may be raised).")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
@click.option("--nproc", type=click.IntRange(min=1), default=1, show_default=True,
              help="Train on N processes of this machine (data-parallel: the batch is divided "
                   "across them; needs gradlog[mpi], or torch for a PyTorch build()).")
def train(example: str | None, logdir: str | None, epochs: int | None,
          batch_size: int | None, lr: float | None, seed: int | None, plugins: tuple,
          no_default_plugins: bool | None, no_graph: bool | None, config_file: str | None,
          strict_plugins: bool | None, resume: str | None, quiet: bool, nproc: int) -> None:
    """Train EXAMPLE and log to TensorBoard.

    EXAMPLE is a built-in example (shapes, the default; shapes-mlp) or a Python file that
    defines build(config) returning the model, optimizer, loss function and data loaders.

    Plugins: -p NAME[:key=value,...], e.g. -p grad-clip:max_norm=1.0 -p histogram:every=50;
    a value is a TOML literal (number, true/false, "string", [array]) or a bare string. A
    --config TOML file holds [train] settings (e.g. train_size = 1000) and [plugins.NAME]
    tables, which enable plugins; flags override [train], -p overrides a table per key.

    The run directory records the whole configuration (run.toml, and each checkpoint):
    --resume DIR restores it. Flags given again with the same value are fine, a larger
    --epochs extends the run, any other difference is refused.

    --nproc N starts N processes (mpiexec -n N gradlog train, or torchrun for a PyTorch
    build(), works too): --batch-size is the global batch, rank 0 writes the run directory,
    and a run resumes on any number of processes.

    Exit status: 0 done, 1 the run failed, 2 usage error, 130/143 interrupted by SIGINT or
    SIGTERM (a checkpoint is saved; continue with --resume DIR).
    """
    from .train import TrainOptions
    from .train import train as run_training
    options = TrainOptions(example=example, logdir=logdir, epochs=epochs, batch_size=batch_size,
                           lr=lr, seed=seed, plugins=plugins,
                           default_plugins=False if no_default_plugins else None,
                           graph=False if no_graph else None,
                           config_file=config_file,
                           strict_plugins=True if strict_plugins else None, resume=resume,
                           quiet=quiet, nproc=nproc)
    from .engines import engine_classes
    status = run_training(options)
    if any(engine.exits_without_teardown() for engine in engine_classes()):
        # (a rank whose engine's job can hang in the interpreter's teardown; everything is
        # written and closed by now)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)


@main.group()
def plugins() -> None:
    """List, inspect and create plugins."""


@plugins.command("list")
def plugins_list() -> None:
    """List installed plugins with their kind and status.

    Columns: name, distribution, version, kind and status (enabled by default, available,
    broken, or a conflict). Each plugin is imported in isolation to show its kind; one that
    fails to import is listed as broken with its error and affects nothing else. A name that
    two distributions declare is listed once, as a conflict naming both: enabling it fails.
    """
    from .plugin.discovery import by_name, conflict_message, discover, inspect_plugin
    from .train import DEFAULT_PLUGINS
    rows = [("NAME", "DISTRIBUTION", "VERSION", "KIND", "STATUS")]
    for name, declared in by_name(discover()).items():
        if len(declared) > 1:  # listed once, naming both; an error only when enabled
            rows.append((name, ",".join(i.distribution for i in declared), "-", "?",
                         "conflict: " + conflict_message(name, declared).split(": ", 1)[1]
                         + "; enabling it fails"))
            continue
        info = declared[0]
        found = inspect_plugin(info)
        if found["error"]:
            error = found["error"]
            kind, status = "?", "broken: " + error.split(" failed to import: ", 1)[-1]
        else:
            kind = found["cls"].kind
            status = "enabled by default" if info.name in DEFAULT_PLUGINS else "available"
        rows.append((info.name, info.distribution, info.version, kind, status))
    if len(rows) == 1:
        click.echo("no plugins installed (entry-point group gradlog.plugins)")
        return
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4])


@plugins.command("show")
@click.argument("name")
def plugins_show(name: str) -> None:
    """Show a plugin's description and options.

    Also its kind (observer or mutator), its order and the registries it touches. A plugin
    that fails to import prints its error and traceback and exits with status 1.
    """
    from .plain_text import plain_text
    from .plugin.discovery import discover, load
    from .plugin.errors import PluginLoadError
    from .plugin.options import describe_options
    try:
        cls = load(name, discover())
    except PluginConfigError as exc:
        raise UserError(str(exc)) from None
    except PluginLoadError as exc:  # a broken plugin: its error and traceback, status 1
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    click.echo(f"{cls.name} ({cls.kind}, order {cls.order})\n")
    click.echo(plain_text(cls.__doc__) + "\n")
    options = describe_options(cls.Options)
    if not options:
        click.echo("options: none")
    else:
        click.echo("options:")
        for o in options:
            bounds = ""
            if o["min"] is not None or o["max"] is not None:
                bounds = f" {'(' if o['min_open'] else '['}" \
                         f"{o['min'] if o['min'] is not None else ''}..." \
                         f"{o['max'] if o['max'] is not None else ''}]"
            click.echo(f"  {o['name']} ({o['type']}{bounds}, default {o['default']!r})")
            if o["help"]:
                click.echo(textwrap.indent(plain_text(o["help"], width=82), " " * 6))
    touches = getattr(cls, "touches", None)
    if touches:
        click.echo(f"\nregistries it touches: {', '.join(touches)}")


@plugins.command("new")
@click.argument("name")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=".",
              show_default=True, help="Where to create the gradlog-NAME/ folder.")
def plugins_new(name: str, directory: str) -> None:
    """Create a ready-to-install plugin package gradlog-NAME/.

    It holds a pyproject.toml that declares NAME in the entry-point group gradlog.plugins,
    the plugin (src/gradlog_NAME/plugin.py: typed options and one event), a test that runs it
    with gradlog.testing.PluginHarness, and a README. NAME is lowercase letters, digits and
    hyphens, starting with a letter.
    """
    from .plugin.discovery import discover
    from .scaffold import ScaffoldError, check_name, format_steps, names, next_steps, write_package
    try:
        check_name(name)
        taken = [i for i in discover() if i.name == name]
        if taken:
            raise ScaffoldError(f"a plugin named '{name}' is already installed (from "
                                f"{taken[0].distribution}); choose another name")
        root = write_package(name, directory)
    except ScaffoldError as exc:
        raise UserError(str(exc)) from None
    n = names(name)
    steps = [(f"cd {root}", ""), *next_steps(name)[1:]]
    click.echo(f"created {root}/ with the plugin '{name}' (class {n['cls']} in "
               f"{n['module']}.plugin)\n\nnext:\n{format_steps(steps, '  ')}")


@main.command("inspect")
@click.argument("logdir", type=click.Path())
def inspect_cmd(logdir: str) -> None:
    """Summarize the runs and tags in LOGDIR, a path or a URL.

    A quick look without a browser; LOGDIR may be any fsspec URL (s3://bucket/exp, ...).
    Runs are LOGDIR and each directory below it with event files. Tags are grouped by prefix
    (train/, val/, or the plugin's name), with their kind (scalar, histogram, image, text,
    ...), the number of points, the step range and, for scalars, the last value. The files
    are read with TensorBoard's own loader.
    """
    from .inspect import InspectError, format_report, inspect_logdir
    try:
        runs = inspect_logdir(logdir)
    except InspectError as exc:
        raise UserError(str(exc)) from None
    click.echo(format_report(runs), nl=False)


@main.command("doctor")
@click.argument("logdir", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="print {\"findings\": [...]} as JSON")
@click.option("--set", "overrides", multiple=True, metavar="KIND.KEY=VALUE",
              help="change a rule's threshold, e.g. vanishing_gradient.relative=1e-3")
def doctor_cmd(logdir: str, as_json: bool, overrides: tuple[str, ...]) -> None:
    """Name what is wrong with the runs in LOGDIR, where, and since when.

    Reads the event files of LOGDIR and each directory below it (finished or still
    running) and applies the doctor's rules to the tags gradlog's plugins log (grad-norm,
    histogram's update ratios, activation-stats, train/ and val/ losses, the doctor's own)
    and a few of other writers. Each finding has a kind, the layers involved, the first
    step, the evidence, one sentence and what to try. Exit status 0 whether or not there
    are findings.
    """
    from . import doctor
    try:
        options: dict[str, dict] = {}
        for text in overrides:
            kind, key, value = doctor.parse_override(text)
            options.setdefault(kind, {})[key] = value
        rules = doctor.rules_with(options)
        runs = doctor.run_directories(logdir)
    except ValueError as exc:  # DoctorError included
        raise UserError(str(exc)) from None
    results = {os.path.relpath(run, logdir): doctor.diagnose(doctor.read_trace(run), rules)
               for run in runs}
    click.echo(doctor.report_json(results) if as_json else doctor.report_text(results),
               nl=as_json)


@main.command("sync")
@click.argument("spool", type=click.Path(exists=True, file_okay=False))
@click.argument("url")
def sync_cmd(spool: str, url: str) -> None:
    """Upload the event files a run left in its local SPOOL to URL.

    URL is the run directory. A run logging to an object store (s3://, gs://, ...) whose
    uploads keep failing stops with one line naming URL and its SPOOL, where the events it
    could not upload wait; a SIGKILL leaves the segment being written there too. Each file
    is uploaded whole, oldest first, and removed from SPOOL once uploaded (run it once the
    run has stopped; gradlog train --resume URL does the same by itself). SPOOL must be the
    spool of URL (.../gradlog/spool/<protocol>/<URL's path>, holding only event files):
    anything else is refused before it is touched. Exit status 1 if an upload fails.
    """
    from . import storage
    try:
        uploaded = storage.upload_spool(spool, url)
    except (ImportError, storage.NotASpool) as exc:
        raise UserError(str(exc)) from None
    except OSError as exc:
        click.echo(f"error: cannot upload {spool} to {exc.filename or url}: "
                   f"{exc.strerror or exc}; what was not uploaded stays in {spool}", err=True)
        sys.exit(1)
    click.echo(f"uploaded {len(uploaded)} file{'s' * (len(uploaded) != 1)} from {spool} "
               f"to {url}")


if __name__ == "__main__":
    main()
