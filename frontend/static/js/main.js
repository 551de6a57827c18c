/* Tidemark dashboard: plain JavaScript modules over the public HTTP API (contract §4, §6, §7),
 * no build step.
 *
 * Data flow: GET /v1/streams fills the stream picker; for the chosen stream the panels ask
 * /v1/streams/{name}/{query} and draw each answer with its bound; the time charts open with
 * the query's history (/v1/streams/{name}/{query}/history). /v1/live announces every
 * published sketch version; announcements are coalesced so a stream is refreshed at most
 * once per COALESCE_MS (heavier panels less often). Queries the server does not offer yet
 * (404, or 422 "unknown query") show a note instead of a chart and are asked again after a
 * while or when the live connection comes back.
 *
 * This module wires the panels: choosing a stream and a window, the live announcements,
 * and the controls. Each panel is a module of its own. */
import { refreshAlerts } from './alerts.js';
import { api, discover, missing, onReachable } from './api.js';
import { emptyPlot, loadPlotly } from './charts.js';
import { DECAY_KINDS, fillDecayDefaults, refreshDecay, resetDecay } from './decayed.js';
import { $, el, setBanner } from './dom.js';
import { refreshFrequency } from './frequency.js';
import { enc, fmtDuration, parseDuration } from './format.js';
import { refreshHeavyHitters } from './heavy-hitters.js';
import { refreshIp } from './inner-product.js';
import { initLifecycle } from './lifecycle.js';
import { connectLive, reachable } from './live.js';
import { renderPicker, renderPickerSoon } from './picker.js';
import { refreshQuantiles } from './quantiles.js';
import {
  ALERTS_POLL_MS, LIST_POLL_MS, SLOW_PANEL_MS, current, state, throttled,
} from './state.js';
import { renderStatus } from './status.js';
import { readHash, renderHead, renderWindowControl, windowAsked, writeHash } from './stream.js';
import { refreshFast, refreshTile, renderTile } from './totals.js';

const PLOTLY_AT_LATEST_MS = 1000;

/** Distinct, self-join, heavy hitters, quantiles and frequency: the slower panels. */
const refreshSlow = throttled(async () => {
  if (!state.selected) return;
  const g = state.gen;
  await Promise.all([refreshTile('distinct', g), refreshTile('self-join', g), refreshHeavyHitters(g),
    refreshQuantiles(g), refreshFrequency(g)]);
}, SLOW_PANEL_MS);

// ---- streams ------------------------------------------------------------------------------
async function loadStreams() {
  const r = await api('/v1/streams');
  if (!r.ok) {
    if (r.status !== 0) setBanner(`Could not list the streams: ${r.detail} (HTTP ${r.status})`);
    return;
  }
  setBanner('');
  const fresh = new Map();
  for (const s of r.body.streams || []) fresh.set(s.name, s);
  // Keep the newer status of the selected stream if an announcement overtook this list.
  const mine = state.streams.get(state.selected);
  const theirs = fresh.get(state.selected);
  if (mine && theirs && (mine.status.sketch_version || 0) > (theirs.status.sketch_version || 0)) {
    fresh.set(state.selected, mine);
  }
  state.streams = fresh;
  state.listed = true;
  renderPicker();
  if (!state.selected || !state.streams.has(state.selected)) {
    const wanted = readHash().stream;
    const first = state.streams.has(wanted) ? wanted : [...state.streams.keys()][0];
    if (first) select(first);
    else renderNoStream();
  } else {
    renderStatus();
  }
}
const loadStreamsSoon = throttled(loadStreams, 2000);

function renderNoStream() {
  $('stream-title').textContent = 'No stream yet';
  $('stream-settings').textContent = '';
  $('status').replaceChildren();
  for (const id of ['count-chart', 'sum-chart', 'hh-chart', 'q-chart', 'q-time-chart', 'decay-chart']) {
    emptyPlot(id, 'no stream declared');
  }
}

// ---- choosing a stream and a window ---------------------------------------------------------
function select(name) {
  if (!state.streams.has(name)) return;
  state.selected = name;
  const maxWindow = current().settings.max_window;
  state.window = state.windowWanted && state.windowWanted <= maxWindow ? state.windowWanted : maxWindow;
  restart();
  renderPicker();
  renderHead();
  fillDecayDefaults();
  $('freq-result').replaceChildren();
}

/** The stream or the window changed: forget older answers and ask everything again. */
function restart() {
  state.gen += 1;
  state.history = { count: [], sum: [] };
  state.latest = {};
  state.backfill = null;
  resetDecay();
  writeHash();
  renderWindowControl();
  refreshFast.now();
  refreshSlow.now();
  refreshDecay.now();
  refreshAlerts.now();
}

function applyWindow(event) {
  event.preventDefault();
  const seconds = windowAsked();
  if (seconds === null) return;
  state.windowWanted = seconds;
  if (seconds === state.window) { renderWindowControl(); return; }
  state.window = seconds;
  $('window-input').value = fmtDuration(seconds);
  restart();
}

function onHashChange() {
  const h = readHash();
  if (h.window) state.windowWanted = h.window;
  if (h.stream && h.stream !== state.selected && state.streams.has(h.stream)) select(h.stream);
  else if (h.window && h.window !== state.window && current() && h.window <= current().settings.max_window) {
    state.window = h.window;
    restart();
  }
}

// ---- live updates ---------------------------------------------------------------------------
/** A stream was deleted (here or elsewhere): it leaves the list; another is shown. */
function forgetStream(name) {
  if (!state.streams.has(name)) return;
  state.streams.delete(name);
  if (state.selected === name) state.selected = null;
  loadStreams();
}

function onAnnouncement(note) {
  if (note.deleted) { forgetStream(note.stream); return; }
  const s = state.streams.get(note.stream);
  if (!s) { loadStreamsSoon(); return; }
  if (Number.isFinite(note.sketch_version) && note.sketch_version > (s.status.sketch_version || 0)) {
    s.status.sketch_version = note.sketch_version;
    renderPickerSoon();
  }
  if (note.stream === state.selected) {
    refreshFast();
    refreshSlow();
    refreshDecay();
  }
  if (note.stream === state.ip.a || note.stream === state.ip.b) refreshIp();
  refreshAlerts();
}

function onReconnected() {
  // Announcements were missed while away, and the server may have new queries.
  missing.clear();
  discover().then(() => {
    refreshSlow.now();
    refreshDecay.now();
    refreshIp.now();
  });
  loadStreams();
  refreshFast.now();
  refreshAlerts.now();
}

// ---- controls ---------------------------------------------------------------------------------
function wire() {
  $('stream-filter').addEventListener('input', () => renderPicker());
  let pickTimer = null;
  $('stream-picker').addEventListener('change', (e) => {
    clearTimeout(pickTimer);
    const name = e.target.value;
    pickTimer = setTimeout(() => { if (name !== state.selected) select(name); }, 120);
  });
  $('window-form').addEventListener('submit', applyWindow);
  $('window-input').addEventListener('change', (e) => applyWindow(e));
  $('hh-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const input = $('hh-phi');
    const phi = parseFloat(input.value);
    if (!(phi > 0 && phi < 1)) { input.setAttribute('aria-invalid', 'true'); return; }
    input.removeAttribute('aria-invalid');
    state.phi = phi;
    refreshSlow.now();
  });
  $('freq-form').addEventListener('submit', (e) => {
    e.preventDefault();
    state.freqKey = $('freq-key').value.trim();
    $('freq-result').replaceChildren(state.freqKey ? el('p', { class: 'muted', text: 'asking…' }) : '');
    refreshSlow.now();
  });
  $('ip-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const raw = $('ip-window').value.trim();
    const w = raw ? parseDuration(raw) : null;
    if (raw && w === null) {
      $('ip-window').setAttribute('aria-invalid', 'true');
      $('ip-result').replaceChildren(el('p', { class: 'note', 'data-kind': 'error', text: 'Use a duration such as 10m.' }));
      return;
    }
    $('ip-window').removeAttribute('aria-invalid');
    state.ip = { a: $('ip-a').value, b: $('ip-b').value, window: w, asked: true };
    refreshIp.now();
  });
  $('decay-form').addEventListener('submit', (e) => { e.preventDefault(); refreshDecay.now(); });
  $('decay-guarantee').addEventListener('change', () => refreshDecay.now());
  for (const kind of DECAY_KINDS) $(`decay-${kind}`).addEventListener('change', () => refreshDecay.now());
  $('alerts-only-stream').addEventListener('change', () => refreshAlerts.now());
  $('q-log').addEventListener('change', () => refreshSlow.now());
  window.addEventListener('hashchange', onHashChange);
  document.addEventListener('visibilitychange', () => {
    if (!document.hidden && state.selected) { refreshFast(); refreshSlow(); }
  });
  setInterval(() => { if (state.selected) renderStatus(); }, 1000);
  setInterval(loadStreams, LIST_POLL_MS);
  setInterval(() => refreshAlerts(), ALERTS_POLL_MS);
}

function start() {
  const h = readHash();
  if (h.window) state.windowWanted = h.window;
  onReachable(reachable);
  wire();
  for (const q of ['count', 'sum', 'distinct', 'self-join']) renderTile(q, null);
  connectLive(onAnnouncement, onReconnected);
  // The stream named in the address is shown without waiting for the list of all streams
  // (hundreds of them take a while), nor for the discovery of the server's routes.
  if (h.stream) openNamed(h.stream);
  loadStreams();
  discover();
  initLifecycle(forgetStream);
  setTimeout(loadPlotly, PLOTLY_AT_LATEST_MS); // the charts, even if no answer comes
}

async function openNamed(name) {
  const r = await api(`/v1/streams/${enc(name)}`);
  if (!r.ok || state.selected) return; // the list came first and chose
  state.streams.set(name, r.body);
  select(name);
}

// For tests and for the curious: the dashboard's state, read-only by convention.
window.tidemark = { state, missing, refresh: () => onReconnected() };

// A module runs after the document is parsed.
start();
