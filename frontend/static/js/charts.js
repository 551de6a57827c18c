/* Plotly charts, created on first view.
 *
 * plotly.js is loaded once the first numbers are on screen (the tiles and the status need
 * no chart). A chart's figure is kept until its node comes near the viewport; charts still
 * off screen are created when the browser is next idle, after the visible ones, so
 * scrolling finds them drawn. Once created, a chart is updated in place (Plotly.react). */
import { $ } from './dom.js';

const PLOT_CONFIG = {
  displaylogo: false, responsive: true,
  modeBarButtonsToRemove: ['select2d', 'lasso2d', 'autoScale2d', 'toggleSpikelines'],
};
const IDLE_AFTER_MS = 1500;    // off-screen charts wait at most this long for an idle moment

const pending = new Map();     // id -> [traces, layout] not drawn yet
const observed = new Set();    // ids under the IntersectionObserver
const created = new Set();     // ids Plotly has drawn into
const handlers = new Map();    // id -> [[event, fn]] attached on creation
const viewed = new Set();        // ids that have been near the viewport
let eager = false;             // after the first idle moment every chart draws at once

let plotly = null;              // the promise of window.Plotly, once asked for

/** Load plotly.js (once) from the URL the page names; resolves with window.Plotly. */
export function loadPlotly() {
  if (plotly) return plotly;
  plotly = new Promise((resolve, reject) => {
    if (window.Plotly) { resolve(window.Plotly); return; }
    const tag = document.createElement('script');
    tag.src = document.querySelector('meta[name="plotly-js"]').dataset.src;
    tag.addEventListener('load', () => (window.Plotly ? resolve(window.Plotly) : reject(new Error('plotly.js did not load'))));
    tag.addEventListener('error', () => reject(new Error('plotly.js did not load')));
    document.head.append(tag);
  });
  plotly.then(() => {
    for (const id of [...pending.keys()]) flush(id);
    const later = () => { eager = true; for (const id of [...pending.keys()]) flush(id); };
    if ('requestIdleCallback' in window) window.requestIdleCallback(later, { timeout: IDLE_AFTER_MS });
    else setTimeout(later, IDLE_AFTER_MS);
  }, () => {});
  return plotly;
}

/** Load plotly.js after the next paint: parsing it holds the page for a moment, so the
 * numbers (tiles, status) are drawn first. */
export function loadPlotlyAfterPaint() {
  if (!plotly) requestAnimationFrame(() => setTimeout(loadPlotly, 0));
}

const observer = 'IntersectionObserver' in window ? new IntersectionObserver((entries) => {
  for (const e of entries) {
    if (!e.isIntersecting) continue;
    viewed.add(e.target.id);
    observer.unobserve(e.target);
    flush(e.target.id);
  }
}, { rootMargin: '200px' }) : null;

function flush(id) {
  const Plotly = window.Plotly;
  const figure = pending.get(id);
  if (!Plotly || !figure || !(created.has(id) || eager || viewed.has(id) || !observer)) return;
  pending.delete(id);
  const node = $(id);
  Plotly.react(node, figure[0], figure[1], PLOT_CONFIG);
  if (!created.has(id)) {
    created.add(id);
    for (const [event, fn] of handlers.get(id) || []) node.on(event, fn);
  }
}

/** Draw (or redraw) chart ``id``; the node keeps its height meanwhile so nothing jumps. */
export function draw(id, traces, layout) {
  showChart(id, true);
  const node = $(id);
  if (layout.height === undefined) layout.height = node.classList.contains('chart-wide') ? 340 : 280;
  node.style.height = `${layout.height}px`;
  pending.set(id, [traces, layout]);
  if (observer && !observed.has(id)) { observed.add(id); observer.observe(node); }
  flush(id);
}

/** Listen to a Plotly event of chart ``id`` (attached when the chart is created). */
export function onChart(id, event, fn) {
  if (!handlers.has(id)) handlers.set(id, []);
  handlers.get(id).push([event, fn]);
  if (created.has(id)) $(id).on(event, fn);
}

/** Collapse a chart whose query the server lacks; the panel's note says why. */
export function showChart(id, visible) {
  const node = $(id);
  if (node.hidden === !visible) return;
  node.hidden = !visible;
  if (!visible) { pending.delete(id); return; }
  if (created.has(id) && window.Plotly) { // redrawn at its real size, handlers anew
    window.Plotly.purge(node);
    created.delete(id);
  }
  if (observer) { observed.delete(id); viewed.delete(id); observer.unobserve(node); }
}

export function baseLayout(extra = {}) {
  return Object.assign({
    margin: { l: 64, r: 16, t: 12, b: 44 },
    font: { family: 'system-ui, -apple-system, "Segoe UI", Roboto, sans-serif', size: 12, color: '#1f2937' },
    paper_bgcolor: 'rgba(0,0,0,0)', plot_bgcolor: '#ffffff',
    hoverlabel: { bgcolor: '#ffffff', bordercolor: '#94a3b8', font: { color: '#111827' }, align: 'left' },
    showlegend: false,
  }, extra);
}

export function rgba(hex, alpha) {
  const n = parseInt(hex.slice(1), 16);
  return `rgba(${(n >> 16) & 255}, ${(n >> 8) & 255}, ${n & 255}, ${alpha})`;
}

export function emptyPlot(id, message) {
  draw(id, [], baseLayout({
    height: 120, margin: { l: 8, r: 8, t: 8, b: 8 },
    xaxis: { visible: false }, yaxis: { visible: false },
    annotations: [{ text: message, showarrow: false, x: 0.5, y: 0.5, xref: 'paper', yref: 'paper',
      font: { size: 14, color: '#64748b' } }],
  }));
}

/** Lower edge (invisible), upper edge filled down to it, then the estimate on top. */
export function bandTraces(x, lower, upper, color, name, legendgroup) {
  return [
    { x, y: lower, type: 'scatter', mode: 'lines', line: { width: 0, color }, hoverinfo: 'skip',
      showlegend: false, legendgroup, name: `${name} lower` },
    { x, y: upper, type: 'scatter', mode: 'lines', line: { width: 0, color }, fill: 'tonexty',
      fillcolor: rgba(color, 0.18), hoverinfo: 'skip', showlegend: false, legendgroup, name: `${name} bound` },
  ];
}

/* Adds an answer to a chart's points, kept sorted by `at` with one answer per `at` (the
 * one from the newest sketch version wins), at most `max` of them (the oldest go). */
export function keepAnswer(list, point, max) {
  let i = list.length;
  while (i > 0 && list[i - 1].at > point.at) i -= 1;
  if (i > 0 && list[i - 1].at === point.at) {
    if ((list[i - 1].version ?? -1) <= (point.version ?? -1)) list[i - 1] = point;
  } else {
    list.splice(i, 0, point);
  }
  if (list.length > max) list.splice(0, list.length - max);
}
