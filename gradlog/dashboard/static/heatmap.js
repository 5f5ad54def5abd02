// One run's heat map on a canvas: a row per layer, a column per step (or step range), a
// colour per value on a scale (shared by the runs shown, or the run's own), flagged cells
// marked by a strip along their top edge, the doctor's findings by a strip along the bottom
// edge of their first step's cell and a badge on the row; hovering a cell reports it,
// clicking selects its row.

const ROW_HEIGHT = 18;
const MAX_CELL_WIDTH = 24;
const MARK_HEIGHT = 4;
// Perceptually uniform, dark (low) to light (high): ten stops of the viridis colour map.
const STOPS = [[68, 1, 84], [72, 40, 120], [62, 74, 137], [49, 104, 142], [38, 130, 142],
               [31, 158, 137], [53, 183, 121], [109, 205, 89], [180, 222, 44], [253, 231, 37]];
export const SPECIAL = {missing: '#eeeeee', zero: '#000000', nonfinite: '#e4002b'};
const MARK_COLOURS = {exploding: '#e4002b', vanishing: '#00a2ff', doctor: '#ff7f00'};

// JSON carries non-finite values as the strings TensorBoard uses: "NaN", "Infinity".
export function element(tag, className, text) {
  const node = document.createElement(tag);
  node.className = className;
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

export function toNumber(value) {
  return value === null ? null : Number(value);
}

export function formatValue(value) {
  if (value === null) {
    return 'no point';
  }
  if (!Number.isFinite(value) || value === 0) {
    return String(value);
  }
  const size = Math.abs(value);
  return size >= 1e4 || size < 1e-3 ? value.toExponential(3) : value.toPrecision(4);
}

export class ColourScale {
  // kind "log" (from the smallest positive to the largest value shown) or "linear" (0 to 1).
  constructor(kind, rows) {
    this.kind = kind;
    if (kind === 'linear') {
      [this.low, this.high] = [0, 1];
      return;
    }
    let [low, high] = [Infinity, -Infinity];
    for (const row of rows) {
      for (const value of row) {
        if (value !== null && Number.isFinite(value) && value > 0) {
          low = Math.min(low, value);
          high = Math.max(high, value);
        }
      }
    }
    if (low === Infinity) {
      [low, high] = [1, 10];
    } else if (high / low < 10) {
      [low, high] = [low / Math.sqrt(10), high * Math.sqrt(10)];
    }
    [this.low, this.high] = [low, high];
  }

  // The position of value on the scale, 0 to 1, or the name of its special colour.
  position(value) {
    if (value === null) {
      return 'missing';
    }
    if (!Number.isFinite(value)) {
      return 'nonfinite';
    }
    if (this.kind === 'log') {
      if (value <= 0) {
        return 'zero';
      }
      const span = Math.log(this.high) - Math.log(this.low);
      return clamp((Math.log(value) - Math.log(this.low)) / span);
    }
    return clamp((value - this.low) / (this.high - this.low));
  }

  colour(value) {
    const at = this.position(value);
    return typeof at === 'string' ? SPECIAL[at] : colourAt(at);
  }
}

function clamp(x) {
  return Math.min(1, Math.max(0, x));
}

export function colourAt(x) {
  const scaled = x * (STOPS.length - 1);
  const i = Math.min(STOPS.length - 2, Math.floor(scaled));
  const t = scaled - i;
  const [a, b] = [STOPS[i], STOPS[i + 1]];
  const channel = (k) => Math.round(a[k] + (b[k] - a[k]) * t);
  return `rgb(${channel(0)}, ${channel(1)}, ${channel(2)})`;
}

export class HeatMap {
  // data: the /heatmap response with values already numbers; onSelect(rowIndex) on a click.
  constructor(container, data, tooltip, onSelect) {
    this.data = data;
    this.tooltip = tooltip;
    this.element = document.createElement('div');
    this.element.className = 'gf-grid';
    this.labels = document.createElement('div');
    this.labels.className = 'gf-labels';
    this.canvas = document.createElement('canvas');
    this.canvas.className = 'gf-heatmap';
    this.canvas.dataset.rows = String(data.rows.length);
    this.canvas.dataset.columns = String(data.steps.length);
    data.rows.forEach((row, i) => this.labels.append(this.label(row, () => onSelect(i))));
    this.element.append(this.labels, this.canvas);
    container.append(this.element);
    this.canvas.addEventListener('mousemove', (event) => this.hover(event));
    this.canvas.addEventListener('mouseleave', () => { this.tooltip.hidden = true; });
    this.canvas.addEventListener('click', (event) => {
      const cell = this.cellAt(event);
      if (cell) {
        onSelect(cell.row);
      }
    });
  }

  label(row, select) {
    const label = document.createElement('button');
    label.className = 'gf-label';
    label.textContent = row.layer;
    if (row.module) {
      label.append(element('span', 'gf-kind', row.module));
    }
    label.title = `${row.tag}: click for its chart`;
    for (const flag of row.flags) {
      const badge = element('span', `gf-badge gf-${flag.kind}`,
                            flag.kind === 'exploding' ? '\u25b2' : '\u25bc');
      badge.title = `${flag.kind}: ${flag.count} point(s), first ${flag.detail}`;
      label.append(badge);
    }
    if (row.doctor.length) {
      const badge = element('span', 'gf-badge gf-doctor', '\u271a');
      badge.title = row.doctor.map((f) => `doctor: ${f.kind} since step ${f.first_step}: `
          + f.message).join('\n');
      label.append(badge);
    }
    label.addEventListener('click', select);
    return label;
  }

  draw(scale, width) {
    const columns = Math.max(1, this.data.steps.length);
    this.cellWidth = Math.max(1, Math.min(MAX_CELL_WIDTH, Math.floor(width / columns)));
    const [w, h] = [this.cellWidth * columns, ROW_HEIGHT * this.data.rows.length];
    const ratio = window.devicePixelRatio || 1;
    Object.assign(this.canvas, {width: Math.round(w * ratio), height: Math.round(h * ratio)});
    Object.assign(this.canvas.style, {width: `${w}px`, height: `${h}px`});
    const context = this.canvas.getContext('2d');
    context.setTransform(ratio, 0, 0, ratio, 0, 0);
    this.data.values.forEach((row, r) => row.forEach((value, c) => {
      context.fillStyle = scale.colour(value);
      context.fillRect(c * this.cellWidth, r * ROW_HEIGHT, this.cellWidth, ROW_HEIGHT - 1);
    }));
    // A flagged cell gets a strip along its top edge, which leaves its colour readable.
    // A doctor's finding gets one along the bottom edge of its first step's cell.
    this.data.rows.forEach((row, r) => row.marks.forEach(([c, kind]) => {
      context.fillStyle = MARK_COLOURS[kind];
      const top = kind === 'doctor' ? (r + 1) * ROW_HEIGHT - 1 - MARK_HEIGHT : r * ROW_HEIGHT;
      context.fillRect(c * this.cellWidth, top, this.cellWidth, MARK_HEIGHT);
    }));
    this.scale = scale;
  }

  cellAt(event) {
    const box = this.canvas.getBoundingClientRect();
    const column = Math.floor((event.clientX - box.left) / this.cellWidth);
    const row = Math.floor((event.clientY - box.top) / ROW_HEIGHT);
    if (row < 0 || row >= this.data.rows.length || column < 0
        || column >= this.data.steps.length) {
      return null;
    }
    return {row, column};
  }

  hover(event) {
    const cell = this.cellAt(event);
    if (!cell) {
      this.tooltip.hidden = true;
      return;
    }
    const {row, column} = cell;
    const [first, last] = [this.data.steps[column], this.data.step_ends[column]];
    const value = this.data.values[row][column];
    const marks = this.data.rows[row].marks.filter(([c]) => c === column)
        .map(([, k]) => k).filter((k) => k !== 'doctor');
    const doctor = this.data.rows[row].doctor.map((f) => `doctor: ${f.kind} since step `
        + `${f.first_step}`);
    const lines = [`layer ${this.data.rows[row].layer}`,
                   first === last ? `step ${first}` : `steps ${first}\u2013${last} (largest)`,
                   `value ${formatValue(value)}`, ...marks, ...doctor];
    this.tooltip.textContent = lines.join('\n');
    this.tooltip.hidden = false;
    Object.assign(this.tooltip.style, {left: `${event.pageX + 12}px`, top: `${event.pageY + 12}px`});
  }
}

// The colour bar for the legend: a gradient from low to high plus the special colours.
export function legend(scale, label) {
  const element = document.createElement('div');
  element.className = 'gf-legend';
  const bar = document.createElement('span');
  bar.className = 'gf-colourbar';
  const stops = STOPS.map((_, i) => colourAt(i / (STOPS.length - 1))).join(', ');
  bar.style.background = `linear-gradient(to right, ${stops})`;
  const text = (content) => Object.assign(document.createElement('span'), {textContent: content});
  element.append(text(`${label}${scale.kind === 'log' ? ' (log scale)' : ''}: `),
                 text(formatValue(scale.low)), bar, text(formatValue(scale.high)));
  const specials = scale.kind === 'log' ? ['zero', 'nonfinite', 'missing'] : ['nonfinite', 'missing'];
  for (const name of specials) {
    const swatch = text(name === 'nonfinite' ? 'NaN/Inf' : name === 'zero' ? '0' : 'no point');
    swatch.className = 'gf-swatch';
    swatch.style.setProperty('--swatch', SPECIAL[name]);
    element.append(swatch);
  }
  return element;
}
