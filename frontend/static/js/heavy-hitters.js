/* Heavy hitters: every key above φ of the window count, with error bars; a click on a bar
 * looks the key up in the frequency panel. */
import { ask, problemText } from './api.js';
import { baseLayout, draw, emptyPlot, onChart, rgba, showChart } from './charts.js';
import { $, showNote } from './dom.js';
import { finite, fmtDuration, fmtExact, fmtGuarantee, fmtShort, plotlyText } from './format.js';
import { COLORS, state } from './state.js';

const HH_MAX_BARS = 40;

onChart('hh-chart', 'plotly_click', (ev) => {
  const point = ev && ev.points && ev.points[0];
  if (!point || !point.customdata) return;
  $('freq-key').value = point.customdata[5];
  $('freq-form').requestSubmit();
});

export async function refreshHeavyHitters(g) {
  const r = await ask('heavy-hitters', { window: state.window, phi: state.phi });
  if (g !== state.gen) return;
  const note = $('hh-note');
  if (!r.ok) {
    showNote(note, problemText(r, 'Heavy hitters'), r.missing ? 'info' : 'error');
    if (r.missing) showChart('hh-chart', false); else emptyPlot('hh-chart', 'no answer');
    return;
  }
  showNote(note, '');
  const items = [...(r.body.items || [])].sort((p, q) => q.estimate - p.estimate);
  const countEstimate = state.latest.count ? state.latest.count.estimate : null;
  if (!items.length) {
    emptyPlot('hh-chart', `no key reaches φ = ${state.phi} of the window count`);
    return;
  }
  const shown = items.slice(0, HH_MAX_BARS);
  const y = shown.map((_, i) => i);
  const label = (k) => plotlyText(k.length > 22 ? `${k.slice(0, 21)}…` : k);
  const custom = shown.map((it) => [plotlyText(it.key), fmtExact(it.estimate), fmtExact(it.bound.lower),
    fmtExact(it.bound.upper), fmtGuarantee(it.bound), it.key]);
  const traces = [{
    type: 'bar', orientation: 'h', y, x: shown.map((it) => it.estimate), customdata: custom,
    marker: { color: rgba(COLORS.hh, 0.75), line: { color: COLORS.hh, width: 1 } },
    error_x: { type: 'data', symmetric: false, color: '#1f2937', thickness: 1.5, width: 4,
      array: shown.map((it) => Math.max(0, it.bound.upper - it.estimate)),
      arrayminus: shown.map((it) => Math.max(0, it.estimate - it.bound.lower)) },
    hovertemplate: '<b>%{customdata[0]}</b><br>%{customdata[1]} events<br>bound [%{customdata[2]}, %{customdata[3]}]'
      + '<br>%{customdata[4]}<extra></extra>',
  }];
  const shapes = [];
  const annotations = [];
  if (finite(countEstimate) && countEstimate > 0) {
    const t = state.phi * countEstimate;
    shapes.push({ type: 'line', x0: t, x1: t, yref: 'paper', y0: 0, y1: 1, line: { color: '#64748b', dash: 'dash', width: 1 } });
    annotations.push({ x: t, y: 1, yref: 'paper', text: `φ·count ≈ ${fmtShort(t)}`, showarrow: false,
      xanchor: 'left', yanchor: 'bottom', font: { size: 11, color: '#475569' } });
  }
  const height = Math.max(260, 24 * shown.length + 80);
  draw('hh-chart', traces, baseLayout({
    height, margin: { l: 150, r: 24, t: 24, b: 44 },
    xaxis: { title: { text: `events in last ${fmtDuration(state.window)}` }, rangemode: 'tozero', gridcolor: '#eef2f7' },
    yaxis: { tickvals: y, ticktext: shown.map((it) => label(it.key)), autorange: 'reversed', automargin: true },
    shapes, annotations, bargap: 0.25,
  }));
  if (items.length > shown.length) {
    showNote(note, `${items.length} keys reach φ; the ${HH_MAX_BARS} largest are drawn.`);
  }
}
