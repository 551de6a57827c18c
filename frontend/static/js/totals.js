/* Count and sum: tiles, and the time charts (the window's answer against its end `at`).
 * A newly opened chart asks the history of its query (answers at instants across
 * max_window, one request) and then adds each live answer. Distinct and self-join tiles
 * are drawn here too. */
import { api, ask, askHistory, problemText } from './api.js';
import { bandTraces, baseLayout, draw, emptyPlot, keepAnswer, loadPlotlyAfterPaint } from './charts.js';
import { $, el, setBanner } from './dom.js';
import { enc, finite, fmtDuration, fmtExact, fmtGuarantee, fmtInt, fmtInterval, fmtShort, isoUtc } from './format.js';
import { renderPickerSoon } from './picker.js';
import { renderStatus } from './status.js';
import { COALESCE_MS, COLORS, TITLES, UNITS, current, state, throttled } from './state.js';

const HISTORY_MAX = 600;     // points of count/sum history kept per chart
const HISTORY_POINTS = 120;  // instants asked of the server when a chart opens

export function renderTile(query, r) {
  const tile = $(`tile-${query}`);
  const head = el('div', { class: 'tile-label' }, TITLES[query], ' ', el('span', { class: 'unit', text: UNITS[query] }));
  if (!r) { tile.replaceChildren(head, el('div', { class: 'tile-value muted', text: '…' })); return; }
  if (!r.ok) {
    tile.replaceChildren(head, el('div', { class: 'tile-note', text: problemText(r, TITLES[query]) }));
    tile.dataset.available = r.missing ? 'no' : 'error';
    return;
  }
  const a = r.body;
  const b = a.bound || {};
  tile.dataset.available = 'yes';
  const value = el('div', {
    class: 'tile-value', text: fmtShort(a.estimate),
    'data-estimate': a.estimate, 'data-lower': b.lower, 'data-upper': b.upper,
    title: `estimate ${fmtExact(a.estimate)}\nbound ${fmtInterval(b)}\n${fmtGuarantee(b)}\nmethod ${b.method}`,
  });
  tile.replaceChildren(
    head, value,
    el('div', { class: 'tile-bound', text: `between ${fmtShort(b.lower)} and ${fmtShort(b.upper)}` }),
    el('div', { class: 'tile-meta', text: `${fmtGuarantee(b)} · ${b.method || ''} · window ${fmtDuration(a.window)} · v${a.as_of ? a.as_of.sketch_version : '?'}` }),
  );
}

/** A tile of its own query (distinct, self-join), on the slower cadence. */
export async function refreshTile(query, g) {
  const r = await ask(query, { window: state.window });
  if (g !== state.gen) return;
  renderTile(query, r);
}

function addPoint(query, answer) {
  const list = state.history[query];
  const b = answer.bound || {};
  const point = { at: answer.at, estimate: answer.estimate, lower: b.lower, upper: b.upper, bound: b,
    version: answer.as_of ? answer.as_of.sketch_version : null, events: answer.as_of ? answer.as_of.events : null };
  keepAnswer(list, point, HISTORY_MAX);
}

function renderHistory(query) {
  const id = `${query}-chart`;
  const s = current();
  const list = state.history[query];
  const caption = $(`${query}-caption`);
  if (!s || s.status.clock === null || s.status.clock === undefined) {
    emptyPlot(id, 'no events in this stream yet');
    caption.textContent = '';
    return;
  }
  if (!list.length) { emptyPlot(id, 'waiting for the first answer…'); return; }
  const color = COLORS[query];
  const x = list.map((p) => isoUtc(p.at));
  const unit = UNITS[query];
  const custom = list.map((p) => [fmtExact(p.estimate), fmtExact(p.lower), fmtExact(p.upper),
    fmtGuarantee(p.bound), p.version ?? '?', fmtInt(p.events)]);
  const traces = [
    ...bandTraces(x, list.map((p) => p.lower), list.map((p) => p.upper), color, query),
    {
      x, y: list.map((p) => p.estimate), customdata: custom, type: 'scatter',
      mode: list.length > 60 ? 'lines' : 'lines+markers', name: query,
      line: { color, width: 2 }, marker: { color, size: 5 },
      hovertemplate: `%{x} UTC<br><b>%{customdata[0]}</b> ${unit}<br>bound [%{customdata[1]}, %{customdata[2]}]`
        + '<br>%{customdata[3]}<br>sketch v%{customdata[4]} (%{customdata[5]} events)<extra></extra>',
    },
  ];
  const yTitle = `${TITLES[query].toLowerCase()} in last ${fmtDuration(state.window)} (${unit})`;
  // A short history (one answer, say) is drawn against the window it covers, not a blur of
  // milliseconds.
  const first = list[0].at;
  const lastAt = list[list.length - 1].at;
  const xaxis = { title: { text: 'event time (UTC) — window end `at`' }, type: 'date', gridcolor: '#eef2f7' };
  if (lastAt - first < 60) {
    const span = Math.max(60, Math.min(state.window, 3600));
    xaxis.range = [isoUtc(lastAt - span), isoUtc(lastAt + span * 0.05)];
  }
  draw(id, traces, baseLayout({
    xaxis,
    yaxis: { title: { text: yTitle }, rangemode: 'tozero', gridcolor: '#eef2f7', separatethousands: true },
    hovermode: 'closest',
  }));
  const last = list[list.length - 1];
  // A window as long as max_window reaches back to the oldest events kept: no earlier `at`
  // can be answered, so its line starts when the page opens.
  const noPast = state.window >= s.settings.max_window;
  caption.textContent = `${list.length} answer${list.length === 1 ? '' : 's'} kept (up to ${HISTORY_MAX}); `
    + `shaded: the bound (${fmtGuarantee(last.bound)}).`
    + (noPast ? ' A shorter window than max_window shows its earlier answers too.' : '');
}

/** The status, the count and the sum: the panels every announcement refreshes. */
export const refreshFast = throttled(async () => {
  const name = state.selected;
  if (!name) return;
  const g = state.gen;
  const params = { window: state.window };
  const [st, count, sum] = await Promise.all([
    api(`/v1/streams/${enc(name)}`), ask('count', params), ask('sum', params)]);
  if (g !== state.gen) return;
  if (st.ok) {
    const known = state.streams.get(name);
    if (!known || (st.body.status.sketch_version || 0) >= (known.status.sketch_version || 0)) {
      state.streams.set(name, st.body);
    }
    renderStatus();
    renderPickerSoon();
  } else if (st.status === 404) {
    setBanner(`Stream ${name} is no longer declared.`);
  }
  const hasEvents = current() && finite(current().status.clock);
  for (const [query, r] of [['count', count], ['sum', sum]]) {
    renderTile(query, r);
    if (r.ok) {
      state.latest[query] = r.body;
      if (hasEvents) addPoint(query, r.body);
    }
    renderHistory(query);
  }
  loadPlotlyAfterPaint();
  if (hasEvents && state.backfill === null && count.ok) loadHistory(g);
}, COALESCE_MS);

/** Fill the time charts with the window's answers across max_window (one request each). */
async function loadHistory(g) {
  state.backfill = 'running';
  const params = { window: state.window, points: HISTORY_POINTS };
  const got = await Promise.all(['count', 'sum'].map((q) => askHistory(q, params)));
  if (g !== state.gen) return;
  for (const [query, r] of [['count', got[0]], ['sum', got[1]]]) {
    if (r.ok) for (const a of r.body.answers || []) addPoint(query, a);
    renderHistory(query);
  }
  state.backfill = got.every((r) => r.ok) ? 'done' : 'unavailable';
}
