"""gradcam: Grad-CAM (Grad-CAM++, LayerCAM) heat maps of a fixed probe batch, and a class
discrimination score on two-object images.

Capture is captum's: inside ``run.internal_pass("probe")`` a forward hook on the target layer
keeps its output (and a copy of its values), and ``autograd.grad`` takes the gradient of the
target logits with respect to that output only, so no parameter's ``.grad`` is written. The
hook is registered through ``run.hooks`` for the probe and removed right after it: between
probes the model holds no gradcam hooks.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from gradlog.plugin import Plugin, PluginConfigError
from gradlog.plugin.outputs import describe_output, named_tensors, pick_output

__all__ = ["GradCAM", "cam_maps", "upsample_bilinear", "normalize_maps", "colorize",
           "image_grid", "pointing_hits", "COLORMAPS"]

# Perceptual colormaps as 9 anchors (at 0, 1/8, ..., 1), linearly interpolated; their lightness
# rises monotonically, so a brighter pixel always means a larger map value.
COLORMAPS = {
    "viridis": np.array([
        [0.267004, 0.004874, 0.329415], [0.282623, 0.140926, 0.457517],
        [0.229739, 0.322361, 0.545706], [0.172719, 0.448791, 0.557885],
        [0.127568, 0.566949, 0.550556], [0.157851, 0.683765, 0.501686],
        [0.369214, 0.788888, 0.382914], [0.678489, 0.863742, 0.189503],
        [0.993248, 0.906157, 0.143936]]),
    "inferno": np.array([
        [0.001462, 0.000466, 0.013866], [0.087411, 0.044556, 0.224813],
        [0.258234, 0.038571, 0.406485], [0.416331, 0.090203, 0.432943],
        [0.578304, 0.148039, 0.404411], [0.735683, 0.215906, 0.330245],
        [0.865006, 0.316822, 0.226055], [0.954506, 0.468744, 0.099874],
        [0.988362, 0.998364, 0.644924]]),
}
_EPS = 1e-7
_CHUNK = 256  # two-object images per forward pass


@dataclass
class Options:
    layer: str = field(default="", metadata={
        "help": "module path of the target layer, as in named_modules() (e.g. '6' or "
                "'features.3'); empty: the model's last Conv2d (no Conv2d: a notice, no maps)"})
    output: int | str = field(default="", metadata={
        "help": "which tensor of the layer's output to explain when it returns a tuple, list, "
                "dict or dataclass: an index or a key (e.g. 0 for (down, skip), "
                "'last_hidden_state'); empty: the output itself, which must be a tensor"})
    call: int = field(default=0, metadata={
        "help": "which call of the layer in a forward pass to explain, when it runs several "
                "times (0: the first)", "min": 0})
    method: Literal["gradcam", "gradcam++", "layercam"] = field(default="gradcam", metadata={
        "help": "gradcam: channel weights = mean gradient; gradcam++: weights from positive "
                "gradients with pixel coefficients; layercam: ReLU(gradient) x activation"})
    target: Literal["pred", "label"] | int = field(default="pred", metadata={
        "help": "class whose logit is explained: the predicted class, the label, or a class "
                "index for every image"})
    every: int = field(default=100, metadata={
        "help": "probe every N optimizer steps; also at the start and at each epoch end",
        "min": 1})
    num_images: int = field(default=8, metadata={
        "help": "probe images (the first N of the probe set 'probe')", "min": 1, "max": 64})
    colormap: Literal["viridis", "inferno"] = field(default="viridis", metadata={
        "help": "perceptual colormap of the heat map"})
    alpha: float = field(default=0.5, metadata={
        "help": "weight of the heat map in the overlay (0: input only, 1: heat map only)",
        "min": 0.0, "max": 1.0})
    discrimination: Literal["epoch", "every", "off"] = field(default="epoch", metadata={
        "help": "when to score class discrimination on the probe set 'two_object' (needs "
                "masks): at each epoch end, also every N steps, or never"})
    eval_mode: bool = field(default=True, metadata={
        "help": "probe in eval mode (dropout off, BatchNorm running statistics); the model's "
                "modes are restored afterwards either way"})

    def validate(self) -> None:
        if isinstance(self.target, int) and self.target < 0:
            raise ValueError(f"target must be 'pred', 'label' or a class index >= 0, got "
                             f"{self.target}")


# -- maps (pure numpy: activations and gradients in, maps out) --------------------------------
def cam_maps(activations: np.ndarray, gradients: np.ndarray, method: str) -> np.ndarray:
    """Class activation maps ``(B, h, w)`` from a layer's ``(B, C, h, w)`` output and the
    gradient of the target score with respect to it, ReLU'd as in the papers."""
    a = np.asarray(activations, dtype=np.float64)
    g = np.asarray(gradients, dtype=np.float64)
    if method == "gradcam":
        weights = g.mean(axis=(2, 3), keepdims=True)
        cam = (weights * a).sum(axis=1)
    elif method == "gradcam++":
        # Chattopadhyay et al. 2018, closed form under the exp(score) assumption.
        g2, g3 = g * g, g * g * g
        denom = 2.0 * g2 + a.sum(axis=(2, 3), keepdims=True) * g3
        coef = np.where(g != 0, g2 / np.where(denom != 0, denom, _EPS), 0.0)
        weights = (coef * np.maximum(g, 0.0)).sum(axis=(2, 3), keepdims=True)
        cam = (weights * a).sum(axis=1)
    elif method == "layercam":
        cam = (np.maximum(g, 0.0) * a).sum(axis=1)
    else:
        raise ValueError(f"unknown Grad-CAM method '{method}' (expected gradcam, gradcam++ or "
                         "layercam)")
    return np.maximum(cam, 0.0)


def _bilinear_matrix(n_in: int, n_out: int) -> np.ndarray:
    """Rows that resample a length-``n_in`` axis to ``n_out`` (half-pixel centres, i.e.
    ``align_corners=False``, as PyTorch's and OpenCV's bilinear resize)."""
    src = np.maximum((np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5, 0.0)
    lo = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    hi = np.minimum(lo + 1, n_in - 1)
    frac = src - lo
    m = np.zeros((n_out, n_in))
    np.add.at(m, (np.arange(n_out), lo), 1.0 - frac)
    np.add.at(m, (np.arange(n_out), hi), frac)
    return m


def upsample_bilinear(maps: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``(B, h, w)`` maps resized to ``(B, H, W)`` bilinearly."""
    rows = _bilinear_matrix(maps.shape[1], size[0])
    cols = _bilinear_matrix(maps.shape[2], size[1])
    return rows @ maps @ cols.T


def normalize_maps(maps: np.ndarray) -> np.ndarray:
    """Each map divided by its maximum (all-zero maps stay zero): 0 still means "no
    evidence", the peak is 1."""
    peak = maps.reshape(len(maps), -1).max(axis=1, initial=0.0)
    scale = np.where(peak > 0, peak, 1.0)
    return maps / scale[:, None, None]


def colorize(maps: np.ndarray, colormap: str = "viridis") -> np.ndarray:
    """``(B, H, W)`` values in [0, 1] to ``(B, 3, H, W)`` RGB through a colormap."""
    table = COLORMAPS[colormap]
    pos = np.clip(maps, 0.0, 1.0) * (len(table) - 1)
    lo = np.minimum(np.floor(pos).astype(np.int64), len(table) - 2)
    frac = (pos - lo)[..., None]
    rgb = table[lo] * (1.0 - frac) + table[lo + 1] * frac
    return np.moveaxis(rgb, -1, 1)


def _display(images: np.ndarray) -> np.ndarray:
    """Inputs as ``(B, 3, H, W)`` in [0, 1]: each image min-max scaled, grey replicated."""
    x = np.asarray(images, dtype=np.float64)
    if x.shape[1] != 3:
        x = np.repeat(x.mean(axis=1, keepdims=True), 3, axis=1)
    lo = x.min(axis=(1, 2, 3), keepdims=True)
    span = x.max(axis=(1, 2, 3), keepdims=True) - lo
    return (x - lo) / np.where(span > 0, span, 1.0)


def image_grid(images: np.ndarray, maps: np.ndarray, *, colormap: str = "viridis",
               alpha: float = 0.5, pad: int = 2) -> np.ndarray:
    """One ``(3, H', W')`` image in [0, 1]: a column per probe image, rows input, heat map,
    overlay (``(1 - alpha) * input + alpha * heat map``)."""
    shown = _display(images)
    heat = colorize(maps, colormap)
    rows = (shown, heat, (1.0 - alpha) * shown + alpha * heat)
    b, _, h, w = shown.shape
    grid = np.full((3, 3 * (h + pad) + pad, b * (w + pad) + pad), 0.5)
    for r, row in enumerate(rows):
        for i in range(b):
            y, x = pad + r * (h + pad), pad + i * (w + pad)
            grid[:, y:y + h, x:x + w] = row[i]
    return grid.astype(np.float32)


def pointing_hits(maps: np.ndarray, own: np.ndarray, other: np.ndarray) -> tuple[int, int]:
    """How many maps peak (argmax, first on ties) inside ``own`` and inside ``other``; the
    masks are ``(B, H, W)`` booleans at the maps' resolution."""
    peak = maps.reshape(len(maps), -1).argmax(axis=1)
    idx = np.arange(len(maps))
    return (int(own.reshape(len(maps), -1)[idx, peak].sum()),
            int(other.reshape(len(maps), -1)[idx, peak].sum()))


# -- the plugin -------------------------------------------------------------------------------
def find_layer(model: Any, layer: str) -> str | None:
    """The target layer's module path: ``layer`` checked against ``named_modules()``, or the
    last ``Conv2d`` (matched by class name, so any engine's Conv2d qualifies); None if none."""
    names = [n for n, _ in model.named_modules() if n]
    if layer:
        if layer not in names:
            raise PluginConfigError(f"plugin 'gradcam': the model has no module '{layer}'; its "
                                    f"modules are: {', '.join(names) or '(none)'}")
        return layer
    convs = [n for n, m in model.named_modules()
             if n and any(c.__name__ == "Conv2d" for c in type(m).__mro__)]
    return convs[-1] if convs else None


class UnusableLayer(Exception):
    """The target layer's output is not one (N, C, H, W) tensor (the message says what it
    is)."""


def _as_tensor(engine: Any, value: Any) -> Any:
    return value if engine.is_tensor(value) else engine.from_numpy(
        np.asarray(value, dtype=np.float32))


class GradCAM(Plugin):
    """Grad-CAM heat maps of fixed probe images, and class discrimination on two-object images.

    Every ``every`` optimizer steps, at the start and at each epoch end, the plugin explains the
    target class (predicted by default) of the first ``num_images`` images of the probe set
    ``probe`` at layer ``layer`` (default: the last Conv2d), and logs the image ``gradcam/<layer>``:
    one column per image, rows input, heat map, overlay. The map is ReLU'd, bilinearly
    upsampled to the input size and divided by its maximum; ``gradcam/raw_max`` is the mean
    peak before that division (the scale the picture hides).

    When the run has the probe set ``two_object`` (images, labels (N, 2), masks (N, 2, H, W)),
    it also maps each image for each of its two classes and logs ``gradcam/own_hit`` (the map
    peaks inside that class's object: the mask pixel at the argmax of the upsampled map is set,
    no tolerance), ``gradcam/other_hit`` (inside the other object) and
    ``gradcam/discrimination`` = own_hit - other_hit: a lone object is found by untrained
    networks too, telling two objects apart is what training adds.

    Probes run in an internal pass (other plugins do not see them, ``.grad``, train/eval modes
    and random state are untouched) and hold hooks only while they run.
    """

    name = "gradcam"
    kind = "observer"
    order = 100
    touches = ("a forward hook on the target layer, during its own probe pass only",)
    Options = Options

    def setup(self, run: Any) -> None:
        self.layer = find_layer(run.model, self.options.layer)
        self.last: dict | None = None  # the last probe's targets and maps, for inspection
        self._probed_at: int | None = None
        self._noticed: set[str] = set()
        if self.layer is None:
            self._notice(run, "no-layer", "gradcam: the model has no Conv2d and no layer= was "
                         "given; no maps will be logged")

    def batch_events_every(self) -> int:
        return self.options.every

    # -- events --------------------------------------------------------------------------
    def on_train_start(self, run: Any) -> None:
        if run.step == 0:  # the untrained model's maps (a resumed run has logged them)
            self._probe(run, scores=self.options.discrimination == "every")

    def on_batch_end(self, run: Any) -> None:
        if run.step != self._probed_at:  # (a step of every N: batch_events_every)
            self._probe(run, scores=self.options.discrimination == "every")

    def on_epoch_end(self, run: Any) -> None:
        self._probe(run, scores=self.options.discrimination != "off")

    # -- probing -------------------------------------------------------------------------
    def _notice(self, run: Any, key: str, text: str) -> None:
        if key not in self._noticed:
            self._noticed.add(key)
            run.log_text("gradcam/notice", text)

    def _probe(self, run: Any, *, scores: bool) -> None:
        if self.layer is None:
            return
        self._probed_at = run.step
        probe = run.probe_sets.get("probe")
        two = run.probe_sets.get("two_object") if scores else None
        if scores and (two is None or two.get("masks") is None):
            self._notice(run, "no-two", "gradcam: no probe set 'two_object' with masks; the "
                         "class discrimination score is not measured")
            two = None
        if probe is None or probe.get("images") is None:
            self._notice(run, "no-probe", "gradcam: no probe set 'probe' with images; no maps "
                         "are logged (gl.watch(probe_sets={'probe': {'images': x}}))")
            probe = None
        if probe is not None and isinstance(probe["images"], Mapping):
            self._notice(run, "no-images", "gradcam: the probe set 'probe' holds a dict of "
                         f"inputs ({', '.join(map(str, probe['images']))}), not images; "
                         "Grad-CAM explains (N, C, H, W) image inputs; no maps are logged")
            probe = None
        if probe is None and two is None:
            return
        try:
            with run.internal_pass("probe"):
                if self.options.eval_mode:
                    run.model.eval()
                shown = self._maps(run, probe) if probe is not None else None
                hits = self._discrimination(run, two) if two is not None else None
        except UnusableLayer as exc:  # said once; the layer is not probed again
            self.layer = None
            self._notice(run, "unusable", str(exc))
            warnings.warn(str(exc), RuntimeWarning, stacklevel=2)
            return
        if shown is not None:
            self._log_maps(run, *shown)
        if hits is not None:
            run.log_scalar("gradcam/own_hit", hits[0])
            run.log_scalar("gradcam/other_hit", hits[1])
            run.log_scalar("gradcam/discrimination", hits[0] - hits[1])

    def _capture(self, run: Any, images: Any) -> tuple[Any, np.ndarray, Any]:
        """Forward ``images`` with a forward hook on the layer, removed before returning:
        the layer's output tensor, a copy of its values, and the model's output."""
        outputs: list = []

        def keep(module: Any, args: Any, output: Any) -> None:
            outputs.append(output)

        engine = run.engine
        handle = run.hooks.register_forward_hook(self.layer, keep)
        try:
            with engine.enable_grad():
                logits = run.model(_as_tensor(engine, images))
        finally:
            run.hooks.remove(handle)
        act = self._explained(engine, outputs)
        if not act.requires_grad:
            raise RuntimeError(f"gradcam: the output of layer '{self.layer}' does not require "
                               "grad (are the layers before it frozen?)")
        return act, np.array(engine.to_numpy(act), dtype=np.float64), logits

    def _explained(self, engine: Any, outputs: list) -> Any:
        """The tensor to explain among the layer's calls' outputs (options ``call`` and
        ``output``); an ``UnusableLayer`` saying what the layer returned otherwise."""
        o, where = self.options, f"gradcam: layer '{self.layer}'"
        if o.call >= len(outputs):
            raise UnusableLayer(f"{where} ran {len(outputs)} time(s) in the probe's forward "
                                f"pass, so it has no call={o.call}")
        chosen = outputs[o.call]
        if o.output != "":
            try:
                chosen = pick_output(chosen, o.output)
            except KeyError as exc:
                raise UnusableLayer(f"{where}, output={o.output!r}: {exc.args[0]}") from None
        if not engine.is_tensor(chosen) or chosen.dim() != 4:
            paths = [path[1:] for path, _ in named_tensors(chosen, engine.is_tensor)]
            hint = (f"; pick one with output=<index or key> ({', '.join(paths)})"
                    if len(paths) > 1 else "")
            raise UnusableLayer(f"{where} returned {describe_output(chosen, engine.is_tensor)}; "
                                f"Grad-CAM needs one (N, C, H, W) tensor{hint}; no maps are "
                                "logged")
        return chosen

    def _cams(self, engine: Any, act: Any, values: np.ndarray, logits: Any,
              targets: np.ndarray, retain: bool) -> np.ndarray:
        """Low-resolution maps for one target class per image."""
        num_classes = logits.shape[1]
        if targets.min(initial=0) < 0 or targets.max(initial=0) >= num_classes:
            bad = targets[(targets < 0) | (targets >= num_classes)][0]
            raise ValueError(f"gradcam: target class {int(bad)} is out of range for a model "
                             f"with {num_classes} outputs")
        onehot = np.zeros(tuple(logits.shape))
        onehot[np.arange(len(targets)), targets] = 1.0
        score = (logits * engine.from_numpy(onehot, like=logits)).sum()
        (grad_act,) = engine.grad(score, act, retain_graph=retain)
        return cam_maps(values, engine.to_numpy(grad_act), self.options.method)

    def _targets(self, engine: Any, logits: Any, labels: Any) -> np.ndarray:
        target = self.options.target
        n = logits.shape[0]
        if target == "pred":
            return np.argmax(engine.to_numpy(logits), axis=1)
        if target == "label":
            if labels is None:
                raise ValueError("gradcam: target='label' needs labels in the probe set 'probe'")
            return np.asarray(engine.to_numpy(labels), dtype=np.int64).reshape(n)
        return np.full(n, int(target), dtype=np.int64)

    def _maps(self, run: Any, probe: dict) -> tuple:
        k = self.options.num_images
        images, labels = probe["images"][:k], probe.get("labels")
        labels = labels[:k] if labels is not None else None
        engine = run.engine
        act, values, logits = self._capture(run, images)
        targets = self._targets(engine, logits, labels)
        cams = self._cams(engine, act, values, logits, targets, retain=False)
        if not np.any(values) or not np.any(cams):
            self._notice(run, "zero", f"gradcam: the maps at layer '{self.layer}' are all zero "
                         "(zero gradients or activations there); try another layer=")
        pixels = np.array(engine.to_numpy(images), dtype=np.float64)
        maps = normalize_maps(upsample_bilinear(cams, pixels.shape[-2:]))
        label_list = None if labels is None else engine.to_numpy(labels).tolist()
        self.last = {"step": run.step, "targets": targets, "labels": label_list,
                     "cams": cams, "maps": maps}
        return pixels, maps, cams, targets, label_list

    def _log_maps(self, run: Any, pixels: np.ndarray, maps: np.ndarray, cams: np.ndarray,
                  targets: np.ndarray, labels: list | None) -> None:
        opts = self.options
        run.log_image(f"gradcam/{self.layer}",
                      image_grid(pixels, maps, colormap=opts.colormap, alpha=opts.alpha))
        run.log_scalar("gradcam/raw_max", float(cams.reshape(len(cams), -1).max(axis=1).mean()))
        text = f"targets ({opts.target}): {' '.join(str(int(t)) for t in targets)}"
        if labels is not None:
            text += f"  \nlabels: {' '.join(str(int(v)) for v in labels)}"
        run.log_text("gradcam/targets", text)

    def _discrimination(self, run: Any, two: dict) -> tuple[float, float]:
        """Fractions of (image, class) pairs whose map peaks inside that class's object and
        inside the other object ("inside": the mask pixel at the peak is set, no tolerance)."""
        engine = run.engine
        labels = np.asarray(engine.to_numpy(two["labels"]), dtype=np.int64)
        masks = np.asarray(engine.to_numpy(two["masks"]), dtype=bool)
        own = other = 0
        for start in range(0, len(labels), _CHUNK):
            part = slice(start, start + _CHUNK)
            act, values, logits = self._capture(run, two["images"][part])
            for j in (0, 1):
                cams = self._cams(engine, act, values, logits, labels[part, j],
                                  retain=j == 0)
                maps = upsample_bilinear(cams, masks.shape[-2:])
                hit_own, hit_other = pointing_hits(maps, masks[part, j], masks[part, 1 - j])
                own, other = own + hit_own, other + hit_other
        pairs = 2 * max(len(labels), 1)
        return own / pairs, other / pairs
