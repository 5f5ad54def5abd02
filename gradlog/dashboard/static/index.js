// The "Gradient flow" dashboard. TensorBoard loads this ES module in an iframe whose base URL
// is this plugin's route prefix, so './tags' is /data/plugin/gradient_flow/tags. Per selected
// run, a heat map of the chosen metric (layers in model order by steps), by default on one
// colour scale shared by all runs, so that side-by-side runs compare by colour.

import {showLayer} from './chart.js';
import {ColourScale, element, HeatMap, legend, toNumber} from './heatmap.js';
import {connectToHost} from './host.js';

// TensorBoard tells an iframed plugin every run (experimental.GetRuns), not which ones its run
// selector has ticked: until the user picks here, every run with data is shown, at most
// MAX_RUNS of them (the most recently written), and the others are named as hidden.
const MAX_RUNS = 12;

async function getJson(path) {
  const response = await fetch(path);
  if (!response.ok) {
    throw new Error(`${path}: ${response.status} ${await response.text()}`);
  }
  return response.json();
}

function hasData(run) {
  return Object.values(run.tags).some((tags) => tags.length > 0);
}

function flagSummary(data) {
  const layers = data.rows.filter((row) => row.flags.length).map((row) => `${row.layer} `
      + row.flags.map((f) => `${f.kind} (${f.count}\u00d7, from step ${f.first_step})`)
          .join(' and '));
  return layers.length ? `Flagged: ${layers.join('; ')}.` : 'No layer flagged.';
}

function doctorSummary(data) {
  return 'Doctor: ' + data.doctor.map((f) => `${f.kind} in `
      + `${f.layers.length ? f.layers.join(', ') : 'the whole run'} since step ${f.first_step}`)
      .join('; ') + ' (\u271a on the rows it names; gradlog doctor LOGDIR for details).';
}

function layoutNote(data) {
  const order = data.order === 'model'
      ? 'layers in model order'
      : 'layers in the order the plugin wrote them (the run has no model summary)';
  const columns = data.downsampled
      ? `, ${data.steps.length} columns of step ranges (a cell shows the range's largest value)`
      : '';
  return `${data.rows.length} ${order}${columns}.`;
}

class Dashboard {
  constructor(root) {
    this.metric = 'grad_norm';
    this.shared = true; // one colour scale for every run shown, or one per run
    this.selected = null; // the runs the user picked; null: the defaults
    this.generation = 0; // a newer reload or switch makes older responses moot
    this.maps = [];
    this.toolbar = element('header', 'gf-toolbar');
    this.metricSwitch = element('div', 'gf-metrics');
    this.runPicker = element('div', 'gf-runs');
    this.scaleChoice = element('label', 'gf-scale-choice');
    const shared = Object.assign(document.createElement('input'),
                                 {type: 'checkbox', checked: this.shared});
    shared.addEventListener('change', () => this.switchTo(() => { this.shared = shared.checked; }));
    this.scaleChoice.append(shared, ' one colour scale for all runs');
    this.legendSlot = element('div', 'gf-legend-slot');
    this.toolbar.append(this.metricSwitch, this.runPicker, this.scaleChoice, this.legendSlot);
    this.message = element('div', 'gf-message');
    this.panels = element('div', 'gf-panels');
    this.hidden = element('p', 'gf-hidden');
    this.skipped = element('p', 'gf-skipped');
    this.tooltip = element('pre', 'gf-tooltip');
    this.tooltip.hidden = true;
    root.replaceChildren(this.toolbar, this.message, this.hidden, this.panels, this.skipped,
                         this.tooltip);
    window.addEventListener('resize', () => this.drawMaps());
  }

  async reload() {
    const generation = ++this.generation;
    try {
      const index = await getJson('./tags');
      if (generation !== this.generation) {
        return;
      }
      [this.metrics, this.runs] = [index.metrics, index.runs];
      this.renderControls();
      await this.renderPanels(generation);
    } catch (error) {
      this.showMessage(`The dashboard could not read its data: ${error.message}`);
    }
  }

  async switchTo(update) {
    update();
    const generation = ++this.generation;
    this.renderControls();
    try {
      await this.renderPanels(generation);
    } catch (error) {
      this.showMessage(`The dashboard could not read its data: ${error.message}`);
    }
  }

  shownRuns() {
    const withData = this.runs.filter(hasData);
    const chosen = this.selected ?? new Set(withData.map((r) => r.run)
        .sort((a, b) => this.lastWritten(b) - this.lastWritten(a)).slice(0, MAX_RUNS));
    return withData.filter((run) => chosen.has(run.run));
  }

  lastWritten(name) {
    return this.runs.find((run) => run.run === name).last_written ?? 0;
  }

  hiddenNote(shown) {
    const names = new Set(shown.map((run) => run.run));
    const hidden = this.runs.filter((run) => hasData(run) && !names.has(run.run));
    if (!hidden.length) {
      return '';
    }
    const why = this.selected === null
        ? `at most ${MAX_RUNS} runs are shown at first, the most recently written`
        : 'unticked';
    return `${hidden.length} run${hidden.length > 1 ? 's' : ''} hidden (${why}): `
        + `${hidden.map((run) => run.run).join(', ')}. Tick them above to show them.`;
  }

  renderControls() {
    this.metricSwitch.replaceChildren();
    for (const metric of this.metrics) {
      const label = element('label', 'gf-metric');
      const input = Object.assign(document.createElement('input'), {
        type: 'radio', name: 'gf-metric', value: metric.key, checked: metric.key === this.metric});
      input.addEventListener('change', () => this.switchTo(() => { this.metric = metric.key; }));
      label.append(input, ` ${metric.label}`);
      this.metricSwitch.append(label);
    }
    const shown = new Set(this.shownRuns().map((run) => run.run));
    this.runPicker.replaceChildren();
    for (const run of this.runs.filter(hasData)) {
      const label = element('label', 'gf-run-choice');
      const input = Object.assign(document.createElement('input'), {
        type: 'checkbox', value: run.run, checked: shown.has(run.run)});
      input.addEventListener('change', () => this.switchTo(() => {
        const picked = new Set(this.shownRuns().map((r) => r.run));
        picked[input.checked ? 'add' : 'delete'](run.run);
        this.selected = picked;
      }));
      label.append(input, ` ${run.run}`);
      this.runPicker.append(label);
    }
  }

  showMessage(text) {
    this.message.textContent = text;
    this.message.hidden = false;
  }

  noDataMessage() {
    const sources = this.metrics.map((m) => `${m.plugin} (${m.label}s)`).join(', ');
    const flags = this.metrics.map((m) => `-p ${m.plugin}`).join(' ');
    return `No run in this logdir has gradient-flow data yet. This dashboard shows the per-layer `
        + `scalars gradlog's plugins log: ${sources}. Enable them, e.g. gradlog train ${flags}, `
        + `or plugins=[...] in gl.watch(...), and reload.`;
  }

  async renderPanels(generation) {
    const metric = this.metrics.find((m) => m.key === this.metric);
    // an hparams trial (the run gradlog train writes below each run) is no run of its own
    const without = this.runs.filter((run) => !hasData(run) && !run.hparams_trial)
        .map((run) => run.run);
    const shown = this.shownRuns();
    this.hidden.textContent = this.hiddenNote(shown);
    this.skipped.textContent = without.length
        ? `Not shown, no gradient-flow tags: ${without.join(', ')}.` : '';
    const maps = await Promise.all(shown.map((run) => (run.tags[metric.key].length === 0
        ? null
        : getJson(`./heatmap?${new URLSearchParams({run: run.run, metric: metric.key})}`))));
    if (generation !== this.generation) {
      return;
    }
    this.message.hidden = true;
    if (this.runs.filter(hasData).length === 0) {
      this.showMessage(this.noDataMessage());
    }
    for (const data of maps.filter(Boolean)) {
      data.values = data.values.map((row) => row.map(toNumber));
    }
    const common = new ColourScale(metric.scale, maps.filter(Boolean).flatMap((d) => d.values));
    this.legendSlot.replaceChildren(this.shared && shown.length
        ? legend(common, metric.label) : '');
    this.panels.replaceChildren();
    this.maps = [];
    shown.forEach((run, i) => {
      const own = maps[i] && !this.shared;
      const scale = own ? new ColourScale(metric.scale, maps[i].values) : common;
      this.panels.append(this.panel(run.run, maps[i], metric, scale));
    });
    this.drawMaps();
  }

  panel(run, data, metric, scale) {
    const section = element('section', 'gf-panel');
    section.dataset.run = run;
    section.append(element('h3', 'gf-run', run));
    if (data === null) {
      section.append(element('p', 'gf-missing', `This run has no ${metric.label}s: enable the `
          + `${metric.plugin} plugin (gradlog train -p ${metric.plugin}).`));
      return section;
    }
    section.append(element('p', 'gf-note', layoutNote(data)));
    if (!this.shared) {
      section.append(legend(scale, metric.label));
    }
    if (metric.flagged) {
      section.append(element('p', 'gf-flags', flagSummary(data)));
    }
    if (data.doctor.length) {
      section.append(element('p', 'gf-doctor-findings', doctorSummary(data)));
    }
    const detail = element('div', 'gf-detail');
    const map = new HeatMap(section, data, this.tooltip,
                            (row) => showLayer(detail, run, data.rows[row], metric));
    const axis = element('div', 'gf-axis');
    const last = data.step_ends[data.step_ends.length - 1];
    axis.append(element('span', '', `step ${data.steps[0] ?? '-'}`),
                element('span', '', `step ${last ?? '-'}`));
    section.append(axis, detail);
    this.maps.push({map, section, axis, scale});
    return section;
  }

  drawMaps() {
    for (const {map, section, axis, scale} of this.maps) {
      const width = section.clientWidth - map.labels.offsetWidth - 24;
      map.draw(scale, Math.max(60, width));
      axis.style.marginLeft = `${map.labels.offsetWidth}px`;
      axis.style.width = map.canvas.style.width;
    }
  }
}

export async function render() {
  const stylesheet = Object.assign(document.createElement('link'),
                                   {rel: 'stylesheet', href: './style.css'});
  document.head.append(stylesheet);
  const dashboard = new Dashboard(document.body);
  connectToHost({'experimental.DataReloaded': () => dashboard.reload()});
  await dashboard.reload();
}
