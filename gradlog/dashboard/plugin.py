"""The TensorBoard plugin behind the "Gradient flow" tab.

Every route reads through ``context.data_provider`` (never the multiplexer), so the dashboard
works on both loaders (``--load_fast=false`` and the Rust data server) and on remote logdirs.
Routes, under ``/data/plugin/gradient_flow/``:

- ``/index.js`` (importing ``/heatmap.js``, ``/chart.js``, ``/host.js``) and ``/style.css``:
  the frontend, an ES module TensorBoard loads in an iframe
  (``frontend_metadata().es_module_path``); no build step, no network access beyond this server.
- ``/tags``: the metrics, and per run the tags that feed each of them, when the run was last
  written, and whether it is only an hparams trial.
- ``/heatmap?run=R&metric=M[&columns=N]``: the rows (layers in model order), at most N columns
  of steps, the values, the flagged layers, and the doctor's findings (``doctor``, and per
  row the findings that name it, marked at their first step's column).
- ``/series?run=R&tag=T``: one layer's points, for the chart a click on a row opens.
"""

from __future__ import annotations

from importlib import resources

from tensorboard import errors, plugin_util
from tensorboard.backend import http_util
from tensorboard.data import provider
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from gradlog.dashboard.doctor import FINDINGS_TAG, first_column, parse_findings, row_findings
from gradlog.dashboard.flow import Point, find_flags, heat_map, summarize, write_times
from gradlog.dashboard.layers import model_order, modules, natural_key, owning_module, parameters
from gradlog.dashboard.metrics import METRICS, layer_tags, metric_named

PLUGIN_NAME = "gradient_flow"
MODEL_TAG = "model/text_summary"   # the model text gradlog train and gl.watch log
STATIC = {"index.js": "text/javascript", "heatmap.js": "text/javascript",
          "chart.js": "text/javascript", "host.js": "text/javascript", "style.css": "text/css"}
DEFAULT_COLUMNS, MAX_COLUMNS = 300, 2000
# Points read per tag: TensorBoard's own default for scalars, or --samples_per_plugin
# scalars=N, at most READ_LIMIT (also for N=0, "all"): the responses stay bounded.
DEFAULT_READ, READ_LIMIT = 1000, 10_000


def _int_argument(request, name: str, default: int, low: int, high: int) -> int:
    raw = request.args.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise errors.InvalidArgumentError(
            f"{name} must be an integer from {low} to {high}; got {raw!r}")
    return value


def _required(request, name: str) -> str:
    value = request.args.get(name)
    if value is None:
        raise errors.InvalidArgumentError(f"missing query parameter {name!r}")
    return value


def _hparams_trial(run: str, tags) -> bool:
    """A run that holds only an hparams trial (its metrics are ``hparam/...`` scalars), such
    as the sub-run PyTorch-style ``add_hparams(..., run_name="hparams")`` writes below a run
    (``gradlog train`` writes its trial into the run itself)."""
    if not tags:
        return run.rpartition("/")[2] == "hparams"
    return all(tag.startswith("hparam/") for tag in tags)


class GradientFlowPlugin(base_plugin.TBPlugin):
    """Heat maps of per-layer gradient norms, update-to-weight ratios and dead-unit fractions."""

    plugin_name = PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext) -> None:
        self._provider = context.data_provider
        hint = (context.sampling_hints or {}).get("scalars")
        self._read_limit = READ_LIMIT if hint == 0 else min(hint or DEFAULT_READ, READ_LIMIT)

    def get_plugin_apps(self) -> dict:
        apps = {f"/{name}": self._static(name, kind) for name, kind in STATIC.items()}
        apps.update({"/tags": self._tags_route, "/heatmap": self._heatmap_route,
                     "/series": self._series_route})
        return apps

    def is_active(self) -> bool:
        return False  # data_plugin_names() decides: the tab shows whenever there are scalars

    def data_plugin_names(self) -> tuple[str, ...]:
        # Active with any scalars, so a run without our tags gets the dashboard's message
        # naming the plugins to enable instead of no tab at all.
        return ("scalars",)

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="Gradient flow")

    def _static(self, name: str, content_type: str):
        @wrappers.Request.application
        def serve(request):
            body = resources.files(__package__).joinpath("static", name).read_bytes()
            return http_util.Respond(request, body, content_type)
        return serve

    # -- reading through the data provider ------------------------------------------------

    def _list(self, request, run: str | None = None) -> dict:
        return self._provider.list_scalars(
            plugin_util.context(request.environ),
            experiment_id=plugin_util.experiment_id(request.environ), plugin_name="scalars",
            run_tag_filter=provider.RunTagFilter(runs=[run]) if run is not None else None)

    def _read(self, request, run: str, tags: list[str]) -> dict:
        data = self._provider.read_scalars(
            plugin_util.context(request.environ),
            experiment_id=plugin_util.experiment_id(request.environ), plugin_name="scalars",
            downsample=self._read_limit,
            run_tag_filter=provider.RunTagFilter(runs=[run], tags=tags))
        return data.get(run, {})

    def _last_text(self, request, run: str, tag: str) -> str | None:
        """The run's last text of ``tag`` (e.g. the ``model`` text: its repr, and its
        parameter table), or None."""
        data = self._provider.read_tensors(
            plugin_util.context(request.environ),
            experiment_id=plugin_util.experiment_id(request.environ), plugin_name="text",
            downsample=1, run_tag_filter=provider.RunTagFilter(runs=[run], tags=[tag]))
        points = data.get(run, {}).get(tag)
        if not points:
            return None
        text = points[-1].numpy.ravel()[0]
        return text.decode("utf-8") if isinstance(text, bytes) else str(text)

    def _runs(self, request) -> list[str]:
        ctx = plugin_util.context(request.environ)
        eid = plugin_util.experiment_id(request.environ)
        return sorted((r.run_name for r in self._provider.list_runs(ctx, experiment_id=eid)),
                      key=natural_key)

    # -- routes ---------------------------------------------------------------------------

    @wrappers.Request.application
    def _tags_route(self, request):
        listing = self._list(request)
        runs = [{"run": run,
                 "tags": {m.key: sorted(layer_tags(m, listing.get(run, {})).values(),
                                        key=natural_key) for m in METRICS},
                 "last_written": max((t.max_wall_time for t in listing.get(run, {}).values()),
                                     default=None),
                 "hparams_trial": _hparams_trial(run, listing.get(run, {}))}
                for run in self._runs(request)]
        body = {"metrics": [m.describe() for m in METRICS], "runs": runs}
        return http_util.Respond(request, body, "application/json")

    @wrappers.Request.application
    def _heatmap_route(self, request):
        run = _required(request, "run")
        try:
            metric = metric_named(request.args.get("metric"))
        except ValueError as exc:
            raise errors.InvalidArgumentError(str(exc)) from None
        columns = _int_argument(request, "columns", DEFAULT_COLUMNS, 1, MAX_COLUMNS)
        runs = self._runs(request)
        if run not in runs:
            raise errors.NotFoundError(f"no run {run!r}; runs: {', '.join(runs) or 'none'}")
        tags = layer_tags(metric, self._list(request, run).get(run, {}))
        data = self._read(request, run, list(tags.values()))
        series = {layer: [Point(d.step, d.wall_time, d.value) for d in data.get(tag, ())]
                  for layer, tag in tags.items()}
        text = self._last_text(request, run, MODEL_TAG)
        model = modules(text) if text is not None else None
        kinds = dict(model or ())
        order = model_order(series, [name for name, _ in model] if model else None,
                            write_times(series), parameters(text) if text is not None else None)
        body = heat_map(series, order, columns)
        flags = find_flags(series) if metric.flagged else {}
        findings = parse_findings(self._last_text(request, run, FINDINGS_TAG))
        rows = []
        for layer in order:
            summary, marks = summarize(flags.get(layer, []), body["steps"])
            doctor = row_findings(layer, findings)
            marks += [[column, "doctor"] for column in sorted(
                {first_column(f["first_step"], body["steps"]) for f in doctor} - {None})]
            rows.append({"layer": layer, "tag": tags[layer], "flags": summary, "marks": marks,
                         "module": kinds.get(owning_module(layer, kinds), ""),
                         "doctor": [{k: f[k] for k in ("kind", "first_step", "message")}
                                    for f in doctor]})
        body.update(run=run, metric=metric.key, rows=rows, doctor=findings,
                    order="model" if model else "write order")
        return http_util.Respond(request, body, "application/json")

    @wrappers.Request.application
    def _series_route(self, request):
        run, tag = _required(request, "run"), _required(request, "tag")
        points = self._read(request, run, [tag]).get(tag)
        if points is None:
            raise errors.NotFoundError(f"no scalar {tag!r} in run {run!r}")
        body = [[p.step, p.wall_time, p.value] for p in points]
        return http_util.Respond(request, body, "application/json")
