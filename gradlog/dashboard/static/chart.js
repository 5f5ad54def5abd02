// The chart a click on a row opens: the layer's every point (not the heat map's downsampled
// columns) as a line, on the metric's scale, and links to TensorBoard's own Scalars and
// Histograms dashboards filtered to that layer.

import {formatValue, toNumber} from './heatmap.js';

const SVG = 'http://www.w3.org/2000/svg';
const [WIDTH, HEIGHT, PAD] = [640, 160, 34];
const MAX_DOTS = 80; // points drawn as dots too, when they are few enough to tell apart

function svg(name, attributes) {
  const element = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) {
    element.setAttribute(key, String(value));
  }
  return element;
}

function escapeRegex(text) {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

// A link that switches the TensorBoard page (this dashboard's parent) to another tab with its
// tag filter set, as TensorBoard's own URLs do: #scalars&tagFilter=<regex>.
function dashboardLink(text, tab, filter) {
  const link = document.createElement('a');
  link.className = 'gf-link';
  link.textContent = text;
  link.href = `#${tab}&tagFilter=${encodeURIComponent(filter)}`;
  link.addEventListener('click', (event) => {
    event.preventDefault();
    window.top.location.hash = `${tab}&tagFilter=${encodeURIComponent(filter)}`;
  });
  return link;
}

function plot(points, logScale) {
  const usable = points.filter(([, , v]) => Number.isFinite(v) && (!logScale || v > 0));
  const chart = svg('svg', {class: 'gf-chart', viewBox: `0 0 ${WIDTH} ${HEIGHT}`});
  if (usable.length === 0) {
    return chart;
  }
  const y = (v) => (logScale ? Math.log10(v) : v);
  const steps = points.map(([s]) => s);
  const [s0, s1] = [Math.min(...steps), Math.max(...steps)];
  const ys = usable.map(([, , v]) => y(v));
  let [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  if (y1 - y0 < 1e-12) {
    [y0, y1] = [y0 - 1, y1 + 1];
  }
  const px = (s) => PAD + (s1 === s0 ? 0.5 : (s - s0) / (s1 - s0)) * (WIDTH - 2 * PAD);
  const py = (v) => HEIGHT - PAD + ((y(v) - y0) / (y1 - y0)) * (2 * PAD - HEIGHT);
  const line = usable.map(([s, , v]) => `${px(s).toFixed(1)},${py(v).toFixed(1)}`).join(' ');
  chart.append(svg('polyline', {points: line, class: 'gf-line'}));
  if (usable.length <= MAX_DOTS) {
    for (const [s, , v] of usable) {
      chart.append(svg('circle', {cx: px(s), cy: py(v), r: 2.5, class: 'gf-dot'}));
    }
  }
  // What the scale cannot place: NaN/Inf along the top, zeros of a log scale along the bottom.
  for (const [s, , v] of points.filter(([, , v]) => !Number.isFinite(v))) {
    chart.append(svg('circle', {cx: px(s), cy: PAD / 2, r: 4, class: 'gf-nonfinite'}));
  }
  for (const [s, , v] of points.filter(([, , v]) => logScale && v <= 0)) {
    chart.append(svg('circle', {cx: px(s), cy: HEIGHT - PAD / 2 - 6, r: 3, class: 'gf-zero'}));
  }
  const text = (x, yPos, content, anchor) => {
    const label = svg('text', {x, y: yPos, 'text-anchor': anchor, class: 'gf-tick'});
    label.textContent = content;
    return label;
  };
  const value = (v) => formatValue(logScale ? 10 ** v : v);
  chart.append(text(PAD, HEIGHT - 8, `step ${s0}`, 'start'),
               text(WIDTH - PAD, HEIGHT - 8, `step ${s1}`, 'end'),
               text(2, HEIGHT - PAD, value(y0), 'start'), text(2, PAD - 4, value(y1), 'start'));
  return chart;
}

// Fills `container` with the chart of `row` (a /heatmap row) of `run` for `metric`.
export async function showLayer(container, run, row, metric) {
  container.replaceChildren();
  const title = document.createElement('h4');
  title.textContent = `${row.layer}: ${metric.label} (${row.tag})`;
  container.append(title);
  const query = new URLSearchParams({run, tag: row.tag});
  const response = await fetch(`./series?${query}`);
  if (!response.ok) {
    container.append(`Could not read ${row.tag}: ${await response.text()}`);
    return;
  }
  const points = (await response.json()).map(([s, w, v]) => [s, w, toNumber(v)]);
  container.append(plot(points, metric.scale === 'log'));
  for (const flag of row.flags) {
    const note = document.createElement('p');
    note.className = `gf-flag gf-${flag.kind}`;
    note.textContent = `${flag.kind} at ${flag.count} point(s), steps ${flag.first_step}`
        + `\u2013${flag.last_step}; first: ${flag.detail}`;
    container.append(note);
  }
  const links = document.createElement('p');
  links.append(dashboardLink('Open in Scalars', 'scalars', `^${escapeRegex(row.tag)}$`));
  const histograms = metric.histograms.replace('{layer}', escapeRegex(row.layer));
  links.append(' \u00b7 ', dashboardLink('Open in Histograms', 'histograms', histograms));
  container.append(links);
}
