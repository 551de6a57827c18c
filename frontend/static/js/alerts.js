/* Alert rules and their state (GET /v1/alerts), optionally only the chosen stream's. */
import { api, knownMissing, missingAnswer, noteMissing, problemText } from './api.js';
import { $, el, showNote } from './dom.js';
import { fmtAge, fmtExact, fmtInterval, fmtShort } from './format.js';
import { ALERTS_MS, state, throttled } from './state.js';

function row(a) {
  const params = Object.entries(a.params || {}).map(([k, v]) => `${k}=${v}`).join(' ');
  const last = a.last;
  const stateName = a.state || 'ok';
  return el('tr', { 'data-state': stateName, 'data-id': a.id },
    el('td', {}, el('span', { class: `badge badge-${stateName}`, text: stateName })),
    el('td', { text: a.stream }),
    el('td', { text: params ? `${a.query} (${params})` : a.query }),
    el('td', { text: `${a.op} ${fmtExact(a.threshold)}` }),
    el('td', { text: a.mode, title: a.mode === 'certain' ? 'fires when the whole bound is past the threshold'
      : 'fires as soon as any part of the bound is past the threshold' }),
    el('td', { text: last ? `${fmtShort(last.estimate)} ${fmtInterval(last.bound, fmtShort)}` : '—',
      title: last ? `estimate ${fmtExact(last.estimate)}, bound ${fmtInterval(last.bound)}, sketch v${last.sketch_version}` : '' }),
    el('td', { text: last && last.evaluated_at ? fmtAge((Date.now() - Date.parse(last.evaluated_at)) / 1000) : '—',
      title: last ? last.evaluated_at : '' }),
  );
}

export const refreshAlerts = throttled(async () => {
  const note = $('alerts-note');
  const table = $('alerts-table');
  const gone = knownMissing('alerts');
  const r = gone ? missingAnswer(gone) : await api('/v1/alerts');
  if (!r.ok && !gone && (r.status === 404 || r.status === 405 || r.status === 501)) noteMissing('alerts', r);
  if (!r.ok) {
    showNote(note, problemText(r, 'Alerts'), r.missing ? 'info' : 'error');
    table.hidden = true;
    return;
  }
  let rules = r.body.alerts || [];
  const onlyMine = $('alerts-only-stream').checked;
  if (onlyMine) rules = rules.filter((a) => a.stream === state.selected);
  table.hidden = rules.length === 0;
  showNote(note, rules.length ? '' : (onlyMine ? 'No alert rule watches this stream.' : 'No alert rule yet.'));
  table.querySelector('tbody').replaceChildren(...rules.map(row));
}, ALERTS_MS);
