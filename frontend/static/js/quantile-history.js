/* Quantiles over time: p50, p90 and p99 of the window against its end `at`, each with its
 * bracket as a band. Opened with the history route (the answers at instants across
 * max_window, one request), then each live answer of the quantile panel is added. */
import { askHistory } from './api.js';
import { bandTraces, baseLayout, draw, emptyPlot, keepAnswer, showChart } from './charts.js';
import { $ } from './dom.js';
import { fmtDuration, fmtExact, isoUtc } from './format.js';
import { current, state } from './state.js';

export const OVER_TIME = [[0.5, '#c2410c'], [0.9, '#7c3aed'], [0.99, '#0f766e']];
const KEEP = 600;            // instants kept per chart
const HISTORY_POINTS = 120;  // instants asked of the server when the chart opens

const kept = { gen: -1, points: [], backfill: null };  // points: [{at, version, items: {q: item}}]

function reset(g) {
  if (kept.gen === g) return;
  kept.gen = g;
  kept.points = [];
  kept.backfill = null;
}

function addAnswer(answer) {
  const items = {};
  for (const it of answer.items || []) if (it.bound) items[it.q] = it;
  if (!OVER_TIME.some(([q]) => items[q])) return;
  const point = { at: answer.at, version: answer.as_of ? answer.as_of.sketch_version : null, items };
  keepAnswer(kept.points, point, KEEP);
}

function render() {
  const id = 'q-time-chart';
  const list = kept.points;
  if (!list.length) { emptyPlot(id, 'waiting for the first answer…'); return; }
  const x = list.map((p) => isoUtc(p.at));
  const traces = [];
  for (const [q, color] of OVER_TIME) {
    const name = `p${Math.round(q * 100)}`;
    const at = list.map((p) => p.items[q] || null);
    traces.push(...bandTraces(x, at.map((it) => (it ? it.bound.lower : null)),
      at.map((it) => (it ? it.bound.upper : null)), color, name, name));
    traces.push({
      x, y: at.map((it) => (it ? it.estimate : null)), type: 'scatter', name, legendgroup: name,
      mode: list.length > 60 ? 'lines' : 'lines+markers', line: { color, width: 2 }, marker: { color, size: 5 },
      customdata: at.map((it) => (it ? [fmtExact(it.bound.lower), fmtExact(it.bound.upper)] : ['', ''])),
      hovertemplate: `%{x} UTC<br>${name} <b>%{y}</b><br>bracket [%{customdata[0]}, %{customdata[1]}]<extra></extra>`,
    });
  }
  const log = $('q-log').checked;
  const xaxis = { title: { text: 'event time (UTC) — window end `at`' }, type: 'date', gridcolor: '#eef2f7' };
  const first = list[0].at;
  const lastAt = list[list.length - 1].at;
  if (lastAt - first < 60) {  // a short history is drawn against the window it covers
    const span = Math.max(60, Math.min(state.window, 3600));
    xaxis.range = [isoUtc(lastAt - span), isoUtc(lastAt + span * 0.05)];
  }
  draw(id, traces, baseLayout({
    showlegend: true, legend: { orientation: 'h', x: 0, y: 1, yanchor: 'bottom' },
    margin: { l: 64, r: 16, t: 28, b: 44 },
    xaxis,
    yaxis: { title: { text: `value in last ${fmtDuration(state.window)}${log ? ' (log)' : ''}` },
      gridcolor: '#eef2f7', type: log ? 'log' : 'linear' },
    hovermode: 'closest',
  }));
  const s = current();
  const noPast = s && state.window >= s.settings.max_window;
  $('q-time-caption').textContent = `${list.length} answer${list.length === 1 ? '' : 's'} kept (up to ${KEEP}); `
    + 'shaded: each bracket (deterministic).'
    + (noPast ? ' A shorter window than max_window shows its earlier answers too.' : '');
}

/** The quantile panel answered (``answer``: its body, or null when it has none). */
export async function refreshQuantileHistory(g, answer) {
  reset(g);
  if (!answer) {  // no quantiles here (yet): hide the chart, ask the history again once there are
    kept.points = [];
    kept.backfill = null;
    showChart('q-time-chart', false);
    $('q-time-caption').textContent = '';
    return;
  }
  addAnswer(answer);
  render();
  if (kept.backfill !== null) return;
  kept.backfill = 'running';
  const r = await askHistory('quantiles', { window: state.window, points: HISTORY_POINTS,
    q: OVER_TIME.map(([q]) => q).join(',') });
  if (g !== state.gen) return;
  kept.backfill = r.ok ? 'done' : 'unavailable';
  if (r.ok) for (const a of r.body.answers || []) addAnswer(a);
  render();
}
