/* The stream status panel: clock, counts, lag, sketch version and sizes. */
import { $, el } from './dom.js';
import { fmtAge, fmtBytes, fmtClock, fmtInt } from './format.js';
import { current } from './state.js';

export function renderStatus() {
  const s = current();
  if (!s) return;
  const st = s.status || {};
  const pending = Math.max(0, (st.received || 0) - (st.events || 0) - (st.late_dropped || 0));
  const published = st.updated_at ? Date.parse(st.updated_at) : NaN;
  const age = Number.isFinite(published) ? (Date.now() - published) / 1000 : NaN;
  const bytes = st.sketch_bytes || {};
  const total = Object.values(bytes).reduce((a, b) => a + b, 0);
  const bytesTitle = Object.entries(bytes).map(([k, v]) => `${k}: ${fmtInt(v)} B`).join('\n');
  const rows = [
    ['Clock', fmtClock(st.clock), 'largest event time in the published sketches', 'clock'],
    ['Received', fmtInt(st.received), 'events accepted by ingest', 'received'],
    ['Events', fmtInt(st.events), 'events reflected in the published sketches (the answers count exactly these)', 'events'],
    ['Lag', `${fmtInt(pending)} pending · ${st.updated_at ? `published ${fmtAge(age)}` : 'nothing published yet'}`,
      'events received but not yet in the sketches; time since the last publish', 'lag'],
    ['Late dropped', fmtInt(st.late_dropped), 'events older than clock − max window when they arrived', 'late_dropped'],
    ['Rejected', fmtInt(st.rejected), 'events refused by ingest validation', 'rejected'],
    ['Sketch version', fmtInt(st.sketch_version), st.updated_at ? `published ${st.updated_at}` : 'nothing published yet', 'sketch_version'],
    ['Sketch bytes', total ? fmtBytes(total) : '—', bytesTitle || 'nothing published yet', 'sketch_bytes'],
  ];
  const nodes = [];
  for (const [label, value, title, key] of rows) {
    nodes.push(el('div', { class: 'stat', 'data-key': key, title },
      el('dt', { text: label }), el('dd', { text: value })));
  }
  if (Object.keys(bytes).length) {
    nodes.push(el('div', { class: 'stat stat-wide', 'data-key': 'sketch_parts' },
      el('dt', { text: 'Sketch parts' }),
      el('dd', { text: Object.entries(bytes).map(([k, v]) => `${k} ${fmtBytes(v)}`).join(' · ') })));
  }
  $('status').replaceChildren(...nodes);
}
