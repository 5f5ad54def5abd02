"""``PluginHarness``: test a plugin in three lines, on a tiny model with an in-memory writer.

    h = PluginHarness(MyPlugin, every=2)
    h.run(steps=4)
    assert h.scalars("my-plugin/loss").steps == [0, 2]
    assert h.handles_left() == 0
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["PluginHarness", "MemoryWriter", "Series", "tiny_model", "copy_weights",
           "plugin_distribution"]


@dataclass
class Series:
    """The points logged under one tag, in logging order."""

    steps: list = field(default_factory=list)
    values: list = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.steps)


class MemoryWriter:
    """A SummaryWriter stand-in that keeps everything in memory (same ``add_*`` methods)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, str, int, Any]] = []
        self.closed = False

    def _add(self, kind: str, tag: str, value: Any, step: Any) -> None:
        self.records.append((kind, tag, int(step or 0), value))

    def add_scalar(self, tag: str, value: Any, global_step: Any = None, **_: Any) -> None:
        self._add("scalar", tag, float(np.asarray(value)), global_step)

    def add_histogram(self, tag: str, values: Any, global_step: Any = None, **_: Any) -> None:
        self._add("histogram", tag, np.array(values, dtype=np.float64).reshape(-1), global_step)

    def add_image(self, tag: str, img: Any, global_step: Any = None, **kwargs: Any) -> None:
        self._add("image", tag, np.array(img), global_step)

    def add_images(self, tag: str, imgs: Any, global_step: Any = None, **kwargs: Any) -> None:
        self._add("images", tag, np.array(imgs), global_step)

    def add_text(self, tag: str, text: str, global_step: Any = None, **_: Any) -> None:
        self._add("text", tag, text, global_step)

    def add_hparams(self, hparam_dict: dict, metric_dict: dict, **_: Any) -> None:
        self._add("hparams", "hparams", (dict(hparam_dict), dict(metric_dict)), 0)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def series(self, kind: str, tag: str) -> Series:
        s = Series()
        for k, t, step, value in self.records:
            if k == kind and t == tag:
                s.steps.append(step)
                s.values.append(value)
        return s

    def tags(self, kind: str | None = None) -> list[str]:
        return sorted({t for k, t, _, _ in self.records if kind is None or k == kind})


def tiny_model(engine: str = "gradlog") -> Any:
    """A 4-class CNN on 16x16 single-channel images (a Conv2d for layer-probing plugins). With
    ``engine="torch"``, the same layers in PyTorch holding the weights gradlog's initialisation
    gives, so one seed makes the same model on both engines."""
    from .engines import engine_named
    model = _tiny_cnn(engine_named("gradlog")().nn)
    if engine == "gradlog":
        return model
    return copy_weights(model, _tiny_cnn(engine_named(engine)().nn))


def _tiny_cnn(nn: Any) -> Any:
    """The tiny CNN in ``nn`` (an engine's: the layers have PyTorch's names in each)."""
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))


def copy_weights(source: Any, target: Any) -> Any:
    """Copy every parameter and buffer of ``source`` into ``target``'s of the same name (any
    engines, through numpy); returns ``target``. The names must match exactly."""
    from .engines import engine_for
    src, dst = engine_for(source), engine_for(target)
    values = {**dict(source.named_parameters()), **dict(source.named_buffers())}
    slots = {**dict(target.named_parameters()), **dict(target.named_buffers())}
    if values.keys() != slots.keys():
        raise ValueError(f"copy_weights: the models' names differ: {sorted(values)} vs "
                         f"{sorted(slots)}")
    with dst.no_grad():
        for name, t in slots.items():
            t.copy_(dst.from_numpy(src.to_numpy(values[name]), like=t))
    return target


def plugin_distribution(root: str | Path, name: str, modules: dict[str, str],
                        plugins: dict[str, str]) -> Path:
    """Write a plugin distribution into ``root`` as pip would install it: the ``modules``
    (module name: source, dedented) and a ``.dist-info`` declaring ``plugins`` (plugin name:
    ``"module:Class"``) in the ``gradlog.plugins`` entry-point group. With ``root`` on
    ``sys.path`` or ``PYTHONPATH``, discovery finds them without installing anything."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    for module, source in modules.items():
        (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{name.replace('-', '_')}-0.0.1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.0.1\n")
    (info / "entry_points.txt").write_text(
        "[gradlog.plugins]\n" + "".join(f"{k} = {v}\n" for k, v in plugins.items()))
    return root


class _Converted:
    """Batches with each tensor of another engine (or array) converted to ``engine``'s, so
    the same data feeds a model on either engine."""

    def __init__(self, loader: Any, engine: Any) -> None:
        self.loader, self.engine = loader, engine

    def __iter__(self) -> Any:
        engine = self.engine
        for batch in self.loader:
            yield tuple(t if engine.is_tensor(t) else engine.from_numpy(np.asarray(t))
                        for t in batch)


class PluginHarness:
    """Run one plugin for a few steps on a tiny model (or yours), strict by default.

    ``PluginHarness(PluginClass_or_instance, model=None, optimizer=None, data=None,
    strict=True, seed=0, probe_sets=None, engine=None, **options)``; then
    ``run(steps, epochs=1)`` and read what was logged with ``scalars(tag)``,
    ``histograms(tag)``, ``images(tag)``, ``texts(tag)``, ``tags()``; ``handles_left()``
    counts hooks still registered. ``engine="torch"`` runs the same tiny model, data and probe
    sets in PyTorch (``model=`` picks the engine from its type; ``data`` may hold either
    engine's tensors: they are converted to the model's).
    """

    def __init__(self, plugin: Any, *, model: Any = None, optimizer: Any = None,
                 data: Any = None, loss_fn: Any = None, strict: bool = True, seed: int = 0,
                 probe_sets: dict | None = None, plugins: Any = (), engine: str | None = None,
                 **options: Any) -> None:
        import gradlog as gl
        from gradlog.data import DataLoader, Shapes, TensorDataset

        from .engines import engine_for
        gl.manual_seed(seed)
        self.plugin = plugin(**options) if isinstance(plugin, type) else plugin
        self.model = model if model is not None else tiny_model(engine or "gradlog")
        self.engine = engine_for(self.model)
        self.engine.manual_seed(seed)
        self.optimizer = optimizer if optimizer is not None else self.engine.optim.SGD(
            self.model.parameters(), lr=0.05, momentum=0.9)
        self.loss_fn = loss_fn or self.engine.nn.CrossEntropyLoss()
        if data is None:
            shapes = Shapes(64, size=16, seed=seed)
            data = DataLoader(TensorDataset(gl.from_numpy(shapes.images),
                                            gl.from_numpy(shapes.labels)),
                              batch_size=16, shuffle=True,
                              generator=gl.Generator().manual_seed(seed))
            two = Shapes(16, size=16, objects=2, seed=seed + 1)
            tensor = self.engine.from_numpy
            probe_sets = probe_sets or {
                "probe": {"images": tensor(shapes.images[:4]),
                          "labels": tensor(shapes.labels[:4])},
                "two_object": {"images": tensor(two.images), "labels": tensor(two.labels),
                               "masks": two.masks},
                "validation": {"images": tensor(shapes.images),
                               "labels": tensor(shapes.labels)}}
        self.data = _Converted(data, self.engine)
        self.writer = MemoryWriter()
        self.losses: list[float] = []
        from gradlog.plugin import Run
        self.run_obj = Run(self.model, self.optimizer, self.writer,
                           plugins=[*plugins, self.plugin], strict=strict,
                           probe_sets=probe_sets or {}, seed=seed, auto_batches=False,
                           telemetry_every=0, engine=self.engine)  # the plugin's own logs only

    def run(self, steps: int, epochs: int = 1) -> PluginHarness:
        """Train ``steps`` batches per epoch for ``epochs`` epochs, firing every event."""
        from gradlog.train import accuracy
        run = self.run_obj
        run.start()
        try:
            for _ in range(epochs):
                run.epoch_start()
                done = 0
                while done < steps:
                    for batch in self.data:
                        if done == steps:
                            break
                        x, y = run.begin_batch(batch)
                        self.optimizer.zero_grad()
                        out = self.model(x)
                        loss = self.loss_fn(out, y)
                        loss.backward()
                        self.optimizer.step()
                        self.losses.append(float(loss.item()))
                        metrics = {"train/loss": self.losses[-1]}
                        acc = accuracy(self.engine, out, y)
                        if acc is not None:
                            metrics["train/acc"] = acc
                        run.end_batch(metrics)
                        done += 1
                run.validation_end({"val/loss": self.losses[-1]}, log=False)
                run.epoch_end()
        except BaseException as exc:
            run.finish(error=exc)
            raise
        run.finish()
        return self

    def scalars(self, tag: str) -> Series:
        return self.writer.series("scalar", tag)

    def histograms(self, tag: str) -> Series:
        return self.writer.series("histogram", tag)

    def images(self, tag: str) -> Series:
        return self.writer.series("image", tag)

    def texts(self, tag: str) -> Series:
        return self.writer.series("text", tag)

    def tags(self, kind: str | None = None) -> list[str]:
        return self.writer.tags(kind)

    def handles_left(self) -> int:
        """Hooks still registered by the plugins and the framework (0 after ``run``)."""
        return self.run_obj.handles_left() + self.engine.count_hooks(self.model,
                                                                     self.optimizer)
