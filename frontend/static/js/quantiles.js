/* Quantiles of value: the estimate against q, each bracket shaded; p50/p90/p99 in words
 * and over time (quantile-history.js). */
import { ask, kindMissing, missingAnswer, problemText } from './api.js';
import { bandTraces, baseLayout, draw, emptyPlot, showChart } from './charts.js';
import { $, el, showNote } from './dom.js';
import { fmtExact, fmtGuarantee, fmtInterval, fmtShort } from './format.js';
import { COLORS, hasValues, state } from './state.js';
import { refreshQuantileHistory } from './quantile-history.js';

const QS = [0, 0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1];

export async function refreshQuantiles(g) {
  const note = $('q-note');
  const gone = kindMissing('quantiles');
  if (gone) {
    showNote(note, problemText(missingAnswer(gone), 'Quantiles'));
    $('q-summary').replaceChildren();
    showChart('q-chart', false);
    refreshQuantileHistory(g, null);
    return;
  }
  if (!hasValues()) {
    showNote(note, 'This stream declares no value range (value_min, value_max): quantiles need one.');
    $('q-summary').replaceChildren();
    showChart('q-chart', false);
    refreshQuantileHistory(g, null);
    return;
  }
  const r = await ask('quantiles', { window: state.window, q: QS.join(',') });
  if (g !== state.gen) return;
  if (!r.ok) {
    showNote(note, problemText(r, 'Quantiles'), r.missing ? 'info' : 'error');
    $('q-summary').replaceChildren();
    if (r.missing) showChart('q-chart', false); else emptyPlot('q-chart', 'no answer');
    refreshQuantileHistory(g, null);
    return;
  }
  showNote(note, '');
  const items = [...(r.body.items || [])].sort((p, q) => p.q - q.q);
  if (!items.length || (r.body.as_of && r.body.as_of.events === 0)) {
    $('q-summary').replaceChildren();
    emptyPlot('q-chart', 'no events in the window');
    refreshQuantileHistory(g, r.body);
    return;
  }
  const x = items.map((it) => it.q);
  const custom = items.map((it) => [fmtExact(it.estimate), fmtExact(it.bound.lower), fmtExact(it.bound.upper),
    fmtGuarantee(it.bound)]);
  const log = $('q-log').checked;
  draw('q-chart', [
    ...bandTraces(x, items.map((it) => it.bound.lower), items.map((it) => it.bound.upper), COLORS.quantiles, 'q'),
    { type: 'scatter', mode: 'lines+markers', x, y: items.map((it) => it.estimate), customdata: custom,
      line: { color: COLORS.quantiles, width: 2 }, marker: { size: 6, color: COLORS.quantiles },
      hovertemplate: 'q = %{x}<br>value <b>%{customdata[0]}</b><br>bracket [%{customdata[1]}, %{customdata[2]}]'
        + '<br>%{customdata[3]}<extra></extra>' },
  ], baseLayout({
    xaxis: { title: { text: 'q' }, range: [-0.02, 1.02], gridcolor: '#eef2f7', tickformat: '.2f' },
    yaxis: { title: { text: `value${log ? ' (log scale)' : ''}` }, gridcolor: '#eef2f7', type: log ? 'log' : 'linear' },
    hovermode: 'closest',
  }));
  const pick = (q) => items.find((it) => Math.abs(it.q - q) < 1e-9);
  $('q-summary').replaceChildren(...[0.5, 0.9, 0.99].map(pick).filter(Boolean).map((it) => el('span', {
    class: 'inline-stat', title: `bracket ${fmtInterval(it.bound)} · ${fmtGuarantee(it.bound)}`,
  }, el('b', { text: `p${Math.round(it.q * 100)}` }), ` ${fmtShort(it.estimate)} `,
  el('span', { class: 'muted', text: `[${fmtShort(it.bound.lower)}, ${fmtShort(it.bound.upper)}]` }))));
  refreshQuantileHistory(g, r.body);
}
