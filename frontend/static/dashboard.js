/* Tidemark dashboard: plain JavaScript over the public HTTP API (contract §4, §6, §7).
 *
 * Data flow: GET /v1/streams fills the stream picker; for the chosen stream the panels ask
 * /v1/streams/{name}/{query} and draw each answer with its bound. /v1/live (server-sent
 * events) announces every published sketch version; announcements are coalesced so a
 * stream is refreshed at most once per COALESCE_MS (heavier panels less often). Queries the
 * server does not offer yet (404, or 422 "unknown query") show a note instead of a chart and
 * are asked again after a while or when the live connection comes back.
 */
'use strict';

(() => {
  // ---- settings -------------------------------------------------------------------------
  const HISTORY_MAX = 600;         // points of count/sum history kept per chart
  const BACKFILL_POINTS = 40;      // earlier `at`s asked when a window leaves room for them
  const COALESCE_MS = 250;         // at most one status/count/sum refresh per this
  const SLOW_PANEL_MS = 1000;      // heavy hitters, quantiles, distinct, self-join, frequency
  const DECAY_PANEL_MS = 2000;     // the decayed-sum sweep asks one query per tau and decay
  const ALERTS_MS = 2000;
  const LIST_POLL_MS = 10000;      // the full stream list (new streams, event counts)
  const ALERTS_POLL_MS = 10000;
  const PROBE_AGAIN_MS = 60000;    // ask a missing query again after this
  const MAX_PARALLEL = 4;          // browsers keep 6 connections per host; one is /v1/live
  const TAU_POINTS = 11;
  const QS = [0, 0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1];
  const HH_MAX_BARS = 40;

  const COLORS = {
    count: '#2563eb', sum: '#0f766e', hh: '#7c3aed', quantiles: '#c2410c',
    none: '#475569', sliding: '#2563eb', exponential: '#dc2626', polynomial: '#15803d',
    'finite-exponential': '#b45309',
  };
  const UNITS = {
    count: 'events', sum: 'weight', distinct: 'keys', 'self-join': 'Σ freq²',
    frequency: 'events', 'inner-product': 'Σ freqA·freqB', 'decayed-sum': 'weight',
  };
  const TITLES = { count: 'Count', sum: 'Sum of weight', distinct: 'Distinct keys', 'self-join': 'Self-join size' };

  // ---- small helpers ------------------------------------------------------------------
  const $ = (id) => document.getElementById(id);
  const el = (tag, attrs = {}, ...children) => {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') node.className = v;
      else if (k === 'text') node.textContent = v;
      else if (k.startsWith('data-')) node.setAttribute(k, v);
      else node.setAttribute(k, v === true ? '' : v);
    }
    for (const c of children) if (c !== null && c !== undefined) node.append(c);
    return node;
  };
  const enc = encodeURIComponent;
  const finite = (x) => typeof x === 'number' && Number.isFinite(x);

  const exactFmt = new Intl.NumberFormat('en-US', { maximumFractionDigits: 6 });
  const tileFmt = new Intl.NumberFormat('en-US', { maximumFractionDigits: 2 });
  const compactFmt = new Intl.NumberFormat('en-US', { notation: 'compact', maximumSignificantDigits: 4 });
  const intFmt = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });

  /** Every digit the API gave (hover text, tooltips). */
  function fmtExact(x) {
    if (x === null || x === undefined) return '—';
    if (!finite(x)) return String(x);
    if (x !== 0 && (Math.abs(x) >= 1e15 || Math.abs(x) < 1e-6)) return x.toExponential(6);
    return exactFmt.format(x);
  }
  /** Readable at a glance: separators, two decimals at most, compact above a billion. */
  function fmtShort(x) {
    if (x === null || x === undefined) return '—';
    if (!finite(x)) return String(x);
    if (Math.abs(x) >= 1e9) return compactFmt.format(x);
    if (x !== 0 && Math.abs(x) < 0.01) return x.toPrecision(3);
    return tileFmt.format(x);
  }
  const fmtInt = (x) => (finite(x) ? intFmt.format(x) : '—');
  /** Plotly reads a few HTML tags in its texts: keys (user data) are shown, never parsed. */
  const plotlyText = (t) => String(t).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

  function fmtBytes(n) {
    if (!finite(n)) return '—';
    const units = ['B', 'KiB', 'MiB', 'GiB'];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
    return `${i === 0 ? n : n.toFixed(n < 10 ? 2 : 1)} ${units[i]}`;
  }

  const DURATION = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$/;
  const UNIT_SECONDS = { ms: 0.001, s: 1, m: 60, h: 3600, d: 86400, w: 604800 };
  /** Seconds from "45s", "30m", "12h", "7d" or a plain number of seconds (as the API). */
  function parseDuration(raw) {
    const m = DURATION.exec(String(raw));
    if (!m) return null;
    const seconds = parseFloat(m[1]) * UNIT_SECONDS[m[2] || 's'];
    return Number.isFinite(seconds) && seconds > 0 ? seconds : null;
  }
  function fmtDuration(seconds) {
    if (!finite(seconds)) return '—';
    for (const [unit, size] of [['w', 604800], ['d', 86400], ['h', 3600], ['m', 60]]) {
      if (seconds >= size && Math.abs(seconds / size - Math.round(seconds / size)) < 1e-9) {
        return `${Math.round(seconds / size)}${unit}`;
      }
    }
    if (seconds >= 1) return `${+seconds.toFixed(3)}s`;
    return `${+(seconds * 1000).toFixed(3)}ms`;
  }
  function fmtAge(seconds) {
    if (!finite(seconds)) return '—';
    if (seconds < 1) return 'just now';
    if (seconds < 90) return `${Math.round(seconds)} s ago`;
    if (seconds < 5400) return `${Math.round(seconds / 60)} min ago`;
    if (seconds < 129600) return `${Math.round(seconds / 3600)} h ago`;
    return `${Math.round(seconds / 86400)} d ago`;
  }
  /** Event time (Unix seconds) as a UTC date string Plotly reads as is. */
  function isoUtc(at) {
    return new Date(at * 1000).toISOString().replace('T', ' ').replace('Z', '');
  }
  const fmtClock = (at) => (finite(at) ? `${isoUtc(at).replace(/\.000$/, '')} UTC` : 'no events yet');

  function fmtConfidence(c) {
    if (!finite(c)) return '';
    return c >= 1 ? 'deterministic' : `${+(c * 100).toPrecision(4)}% confidence`;
  }
  /** "relative ε 5% · deterministic" — the guarantee of a bound, in words. */
  function fmtGuarantee(bound) {
    if (!bound) return '';
    if (finite(bound.lower) && bound.lower === bound.upper) return 'exact';
    const eps = finite(bound.epsilon)
      ? (bound.kind === 'relative' ? `±${+(bound.epsilon * 100).toPrecision(3)}%` : `ε ${fmtExact(bound.epsilon)}`)
      : '';
    return [`${bound.kind || '?'} ${eps}`.trim(), fmtConfidence(bound.confidence)].filter(Boolean).join(' · ');
  }
  const fmtInterval = (b, f = fmtExact) => (b ? `[${f(b.lower)}, ${f(b.upper)}]` : '');

  // ---- HTTP -----------------------------------------------------------------------------
  let active = 0;
  const waiting = [];
  async function limited(task) {
    if (active >= MAX_PARALLEL) await new Promise((resolve) => waiting.push(resolve));
    active += 1;
    try { return await task(); } finally {
      active -= 1;
      const next = waiting.shift();
      if (next) next();
    }
  }

  /** GET a JSON endpoint. Never throws: {ok, status, body, detail}. */
  function api(path, params = {}) {
    const url = new URL(path, window.location.origin);
    for (const [k, v] of Object.entries(params)) {
      if (v !== undefined && v !== null && v !== '') url.searchParams.set(k, String(v));
    }
    return limited(async () => {
      let res;
      try {
        // The sign-in cookie (set by /?key=…) rides every same-origin request.
        res = await fetch(url, { headers: { Accept: 'application/json' }, cache: 'no-store',
                                 credentials: 'same-origin' });
      } catch (err) {
        return { ok: false, status: 0, body: null, detail: 'the API is unreachable' };
      }
      if (res.status === 401) {
        setBanner('Not signed in: open the dashboard link printed by "tidemark up" '
                  + '(it ends in /?key=…), or visit /?key=<a key with the read scope>.');
      }
      let body = null;
      try { body = await res.json(); } catch (err) { body = null; }
      let detail = res.statusText;
      if (body && body.detail !== undefined) {
        detail = typeof body.detail === 'string' ? body.detail : JSON.stringify(body.detail);
      }
      if (res.ok) reachable(true);
      return { ok: res.ok, status: res.status, body, detail };
    });
  }

  /** Queries the server does not know yet: name -> {detail, since}. */
  const missing = new Map();
  function isMissing(r) {
    return (r.status === 404 && (!r.detail || r.detail === 'Not Found'))
      || r.status === 405 || r.status === 501
      || (r.status === 422 && /^unknown query/i.test(r.detail || ''));
  }
  function knownMissing(query) {
    const m = missing.get(query);
    if (!m) return null;
    if (performance.now() - m.since > PROBE_AGAIN_MS) { missing.delete(query); return null; }
    return m;
  }
  /** Learn from the server's OpenAPI description which routes exist (and, if the query
   * parameter is an enum, which queries), so missing ones are not even asked. */
  async function discover() {
    const r = await api('/openapi.json');
    if (!r.ok || !r.body || !r.body.paths) return;
    const paths = r.body.paths;
    const since = performance.now();
    const note = (query, path) => missing.set(query, { status: 404, since,
      detail: `the server has no ${path} endpoint` });
    if (!paths['/v1/inner-product']) note('inner-product', 'GET /v1/inner-product');
    if (!paths['/v1/alerts']) note('alerts', 'GET /v1/alerts');
    const route = paths['/v1/streams/{name}/{query}'];
    const param = route && route.get && (route.get.parameters || []).find((x) => x.name === 'query');
    const known = param && param.schema && param.schema.enum;
    if (Array.isArray(known)) {
      for (const q of ['count', 'sum', 'frequency', 'heavy-hitters', 'quantiles', 'distinct', 'self-join', 'decayed-sum']) {
        if (!known.includes(q)) missing.set(q, { status: 422, since, detail: `unknown query '${q}'; known: ${known.join(', ')}` });
      }
    }
  }

  /** Ask one query of the selected stream, remembering the ones the server lacks. */
  async function ask(query, params, stream = state.selected) {
    const gone = knownMissing(query);
    if (gone) return { ok: false, status: gone.status, detail: gone.detail, missing: true };
    const r = await api(`/v1/streams/${enc(stream)}/${query}`, params);
    if (!r.ok && isMissing(r)) {
      missing.set(query, { detail: r.detail, status: r.status, since: performance.now() });
      r.missing = true;
    }
    return r;
  }
  function problemText(r, what) {
    if (r.missing) return `${what} is not available on this server yet (HTTP ${r.status}: ${r.detail}).`;
    if (r.status === 0) return `${what}: the API is unreachable; retrying when it is back.`;
    return `${what}: ${r.detail} (HTTP ${r.status})`;
  }
  function showNote(node, text, kind = 'info') {
    if (!text) { node.hidden = true; node.textContent = ''; return; }
    node.hidden = false;
    node.dataset.kind = kind;
    node.textContent = text;
  }

  // ---- state ------------------------------------------------------------------------------
  const state = {
    streams: new Map(),     // name -> {name, settings, status}
    selected: null,
    windowWanted: null,     // seconds asked by the user (kept across streams when it fits)
    window: null,           // seconds in use for the selected stream
    gen: 0,                 // bumped on stream/window change: older answers are dropped
    history: { count: [], sum: [] },
    latest: {},             // query -> last answer body for the selected stream
    phi: 0.01,
    freqKey: '',
    ip: { a: null, b: null, window: null },
    lastLive: null,
  };

  function current() { return state.streams.get(state.selected) || null; }

  // ---- layout of plots ------------------------------------------------------------------
  const PLOT_CONFIG = {
    displaylogo: false, responsive: true,
    modeBarButtonsToRemove: ['select2d', 'lasso2d', 'autoScale2d', 'toggleSpikelines'],
  };
  function baseLayout(extra = {}) {
    return Object.assign({
      margin: { l: 64, r: 16, t: 12, b: 44 },
      font: { family: 'system-ui, -apple-system, "Segoe UI", Roboto, sans-serif', size: 12, color: '#1f2937' },
      paper_bgcolor: 'rgba(0,0,0,0)', plot_bgcolor: '#ffffff',
      hoverlabel: { bgcolor: '#ffffff', bordercolor: '#94a3b8', font: { color: '#111827' }, align: 'left' },
      showlegend: false,
    }, extra);
  }
  function rgba(hex, alpha) {
    const n = parseInt(hex.slice(1), 16);
    return `rgba(${(n >> 16) & 255}, ${(n >> 8) & 255}, ${n & 255}, ${alpha})`;
  }
  function draw(id, traces, layout) {
    if (!window.Plotly) return;
    showChart(id, true);
    const node = $(id);
    if (layout.height === undefined) layout.height = node.classList.contains('chart-wide') ? 340 : 280;
    node.style.height = `${layout.height}px`;
    window.Plotly.react(node, traces, layout, PLOT_CONFIG);
  }
  /** Collapse a chart whose query the server lacks; the panel's note says why. */
  function showChart(id, visible) {
    const node = $(id);
    if (node.hidden === !visible) return;
    node.hidden = !visible;
    if (visible && window.Plotly) window.Plotly.purge(node); // redrawn at its real size
  }
  function emptyPlot(id, message) {
    draw(id, [], baseLayout({
      height: 120, margin: { l: 8, r: 8, t: 8, b: 8 },
      xaxis: { visible: false }, yaxis: { visible: false },
      annotations: [{ text: message, showarrow: false, x: 0.5, y: 0.5, xref: 'paper', yref: 'paper',
        font: { size: 14, color: '#64748b' } }],
    }));
  }
  /** Lower edge (invisible), upper edge filled down to it, then the estimate on top. */
  function bandTraces(x, lower, upper, color, name, legendgroup) {
    return [
      { x, y: lower, type: 'scatter', mode: 'lines', line: { width: 0, color }, hoverinfo: 'skip',
        showlegend: false, legendgroup, name: `${name} lower` },
      { x, y: upper, type: 'scatter', mode: 'lines', line: { width: 0, color }, fill: 'tonexty',
        fillcolor: rgba(color, 0.18), hoverinfo: 'skip', showlegend: false, legendgroup, name: `${name} bound` },
    ];
  }

  // ---- stream picker ------------------------------------------------------------------------
  let pickerKey = '';
  function optionText(s) {
    const st = s.status || {};
    const n = st.events || 0;
    return `${s.name} — ${n >= 1e5 ? compactFmt.format(n) : fmtInt(n)} ev · v${st.sketch_version ?? 0}`;
  }
  function renderPicker() {
    const picker = $('stream-picker');
    const filter = $('stream-filter').value.trim().toLowerCase();
    const names = [...state.streams.keys()].filter((n) => !filter || n.toLowerCase().includes(filter));
    if (state.selected && !names.includes(state.selected) && state.streams.has(state.selected)) {
      names.unshift(state.selected); // the chosen stream stays visible while filtering
    }
    const key = names.join('\n');
    if (key !== pickerKey) {
      pickerKey = key;
      picker.replaceChildren(...names.map((n) => el('option', { value: n, text: optionText(state.streams.get(n)) })));
    } else {
      for (const opt of picker.options) {
        const text = optionText(state.streams.get(opt.value));
        if (opt.textContent !== text) opt.textContent = text;
      }
    }
    if (state.selected) picker.value = state.selected;
    $('stream-count').textContent = filter ? `${names.length} of ${state.streams.size}` : String(state.streams.size);
    $('stream-empty').hidden = state.streams.size > 0;
    renderIpPickers();
  }
  const renderPickerSoon = throttled(async () => renderPicker(), 500);

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

  function renderNoStream() {
    $('stream-title').textContent = 'No stream yet';
    $('stream-settings').textContent = '';
    $('status').replaceChildren();
    for (const id of ['count-chart', 'sum-chart', 'hh-chart', 'q-chart', 'decay-chart']) {
      emptyPlot(id, 'no stream declared');
    }
  }

  // ---- choosing a stream and a window ---------------------------------------------------
  function select(name) {
    if (!state.streams.has(name)) return;
    state.selected = name;
    const s = current();
    const maxWindow = s.settings.max_window;
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
    state.backfilled = false;
    state.backfill = null;
    refused.clear();
    writeHash();
    renderWindowControl();
    refreshFast.now();
    refreshSlow.now();
    refreshDecay.now();
    refreshAlerts.now();
  }

  function renderHead() {
    const s = current();
    if (!s) return;
    $('stream-title').textContent = s.name;
    const st = s.settings;
    const parts = [`max window ${fmtDuration(st.max_window)}`, `ε ${st.epsilon}`, `δ ${st.delta}`,
      `resolution ${fmtDuration(st.resolution)}`];
    parts.push(st.value_min !== null && st.value_min !== undefined
      ? `values ${fmtExact(st.value_min)} – ${fmtExact(st.value_max)}` : 'no value range');
    if (st.decays && st.decays.length) parts.push(`decays: ${st.decays.map(decayLabel).join(', ')}`);
    $('stream-settings').textContent = parts.join(' · ');
    document.title = `${s.name} · Tidemark`;
  }

  function renderWindowControl() {
    const s = current();
    if (!s) return;
    const maxWindow = s.settings.max_window;
    const input = $('window-input');
    if (document.activeElement !== input) input.value = fmtDuration(state.window);
    input.removeAttribute('aria-invalid');
    $('window-error').textContent = '';
    $('window-help').textContent = `≤ ${fmtDuration(maxWindow)}`;
    const presets = [60, 300, 600, 1800, 3600, 6 * 3600, 86400, 7 * 86400].filter((x) => x < maxWindow);
    presets.push(maxWindow);
    $('window-presets').replaceChildren(...presets.map((x) => el('option', { value: fmtDuration(x) })));
  }

  function applyWindow(event) {
    event.preventDefault();
    const s = current();
    if (!s) return;
    const input = $('window-input');
    const seconds = parseDuration(input.value);
    let problem = '';
    if (seconds === null) problem = 'Use seconds or a duration such as 45s, 30m, 12h, 7d.';
    else if (seconds > s.settings.max_window * (1 + 1e-12)) {
      problem = `At most the stream's max window, ${fmtDuration(s.settings.max_window)}.`;
    }
    if (problem) {
      input.setAttribute('aria-invalid', 'true');
      $('window-error').textContent = problem;
      return;
    }
    state.windowWanted = seconds;
    if (seconds === state.window) { renderWindowControl(); return; }
    state.window = seconds;
    input.value = fmtDuration(seconds);
    restart();
  }

  // ---- location hash: #stream=NAME&window=SECONDS -----------------------------------------
  function readHash() {
    const p = new URLSearchParams(window.location.hash.slice(1));
    return { stream: p.get('stream'), window: parseDuration(p.get('window') || '') };
  }
  function writeHash() {
    const p = new URLSearchParams();
    if (state.selected) p.set('stream', state.selected);
    if (state.window) p.set('window', fmtDuration(state.window));
    const hash = `#${p.toString()}`;
    if (window.location.hash !== hash) window.history.replaceState(null, '', hash);
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

  // ---- status ----------------------------------------------------------------------------------
  function renderStatus() {
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
    const dl = $('status');
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
    dl.replaceChildren(...nodes);
  }

  // ---- tiles ------------------------------------------------------------------------------------
  function renderTile(query, r) {
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

  // ---- count and sum over time ------------------------------------------------------------------
  function addPoint(query, answer) {
    const list = state.history[query];
    const b = answer.bound || {};
    const point = { at: answer.at, estimate: answer.estimate, lower: b.lower, upper: b.upper, bound: b,
      version: answer.as_of ? answer.as_of.sketch_version : null, events: answer.as_of ? answer.as_of.events : null };
    // Sorted by `at`; one answer per `at` (the one from the newest sketch wins).
    let i = list.length;
    while (i > 0 && list[i - 1].at > point.at) i -= 1;
    if (i > 0 && list[i - 1].at === point.at) {
      if ((list[i - 1].version ?? -1) <= (point.version ?? -1)) list[i - 1] = point;
    } else {
      list.splice(i, 0, point);
    }
    if (list.length > HISTORY_MAX) list.splice(0, list.length - HISTORY_MAX);
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
    caption.textContent = `${list.length} answer${list.length === 1 ? '' : 's'} kept (up to ${HISTORY_MAX}); `
      + `shaded: the bound (${fmtGuarantee(last.bound)}).`;
  }

  const refreshFast = throttled(async () => {
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
    const hasEvents = current() && current().status.clock !== null && current().status.clock !== undefined;
    for (const [query, r] of [['count', count], ['sum', sum]]) {
      renderTile(query, r);
      if (r.ok) {
        state.latest[query] = r.body;
        if (hasEvents) addPoint(query, r.body);
      }
      renderHistory(query);
    }
    if (hasEvents && !state.backfilled && count.ok) {
      state.backfilled = true;
      backfill(g);
    }
  }, COALESCE_MS);

  /** Ask the same window at earlier ends `at`, as far back as max_window allows. */
  async function backfill(g) {
    const s = current();
    const clock = s.status.clock;
    const room = s.settings.max_window - state.window;
    if (!(room > 0) || !finite(clock)) return;
    const margin = Math.min(room * 0.02, 60);
    const start = clock - room + margin;
    const step = (clock - start) / BACKFILL_POINTS;
    if (!(step > 0)) return;
    state.backfill = 'running';
    const ats = [];
    for (let i = 0; i < BACKFILL_POINTS; i += 1) ats.push(start + i * step);
    await Promise.all(ats.map(async (at) => {
      const [c, w] = await Promise.all([ask('count', { window: state.window, at }), ask('sum', { window: state.window, at })]);
      if (g !== state.gen) return;
      if (c.ok) addPoint('count', c.body);
      if (w.ok) addPoint('sum', w.body);
      renderHistorySoon();
    }));
    if (g !== state.gen) return;
    state.backfill = 'done';
    renderHistory('count');
    renderHistory('sum');
  }
  const renderHistorySoon = throttled(async () => {
    renderHistory('count');
    renderHistory('sum');
  }, 200);

  // ---- slower panels: distinct, self-join, heavy hitters, quantiles, frequency -------------------
  const refreshSlow = throttled(async () => {
    if (!state.selected) return;
    const g = state.gen;
    await Promise.all([refreshTile('distinct', g), refreshTile('self-join', g), refreshHeavyHitters(g),
      refreshQuantiles(g), refreshFrequency(g)]);
  }, SLOW_PANEL_MS);

  async function refreshTile(query, g) {
    const r = await ask(query, { window: state.window });
    if (g !== state.gen) return;
    renderTile(query, r);
  }

  async function refreshHeavyHitters(g) {
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
    $('hh-chart').style.height = `${height}px`;
    draw('hh-chart', traces, baseLayout({
      height, margin: { l: 150, r: 24, t: 24, b: 44 },
      xaxis: { title: { text: `events in last ${fmtDuration(state.window)}` }, rangemode: 'tozero', gridcolor: '#eef2f7' },
      yaxis: { tickvals: y, ticktext: shown.map((it) => label(it.key)), autorange: 'reversed', automargin: true },
      shapes, annotations, bargap: 0.25,
    }));
    if (items.length > shown.length) {
      showNote(note, `${items.length} keys reach φ; the ${HH_MAX_BARS} largest are drawn.`);
    }
    const node = $('hh-chart');
    if (!node.dataset.clickable && node.on) {
      node.dataset.clickable = 'yes';
      node.on('plotly_click', (ev) => {
        const point = ev && ev.points && ev.points[0];
        if (!point || !point.customdata) return;
        $('freq-key').value = point.customdata[5];
        $('freq-form').requestSubmit();
      });
    }
  }

  function hasValues() {
    const s = current();
    return s && s.settings.value_min !== null && s.settings.value_min !== undefined;
  }

  async function refreshQuantiles(g) {
    const note = $('q-note');
    const gone = knownMissing('quantiles');
    if (gone) {
      showNote(note, problemText({ ...gone, missing: true }, 'Quantiles'));
      $('q-summary').replaceChildren();
      showChart('q-chart', false);
      return;
    }
    if (!hasValues()) {
      showNote(note, 'This stream declares no value range (value_min, value_max): quantiles need one.');
      $('q-summary').replaceChildren();
      showChart('q-chart', false);
      return;
    }
    const r = await ask('quantiles', { window: state.window, q: QS.join(',') });
    if (g !== state.gen) return;
    if (!r.ok) {
      showNote(note, problemText(r, 'Quantiles'), r.missing ? 'info' : 'error');
      $('q-summary').replaceChildren();
      if (r.missing) showChart('q-chart', false); else emptyPlot('q-chart', 'no answer');
      return;
    }
    showNote(note, '');
    const items = [...(r.body.items || [])].sort((p, q) => p.q - q.q);
    if (!items.length || (r.body.as_of && r.body.as_of.events === 0)) {
      $('q-summary').replaceChildren();
      emptyPlot('q-chart', 'no events in the window');
      return;
    }
    const x = items.map((it) => it.q);
    const custom = items.map((it) => [fmtExact(it.estimate), fmtExact(it.bound.lower), fmtExact(it.bound.upper),
      fmtGuarantee(it.bound)]);
    draw('q-chart', [
      ...bandTraces(x, items.map((it) => it.bound.lower), items.map((it) => it.bound.upper), COLORS.quantiles, 'q'),
      { type: 'scatter', mode: 'lines+markers', x, y: items.map((it) => it.estimate), customdata: custom,
        line: { color: COLORS.quantiles, width: 2 }, marker: { size: 6, color: COLORS.quantiles },
        hovertemplate: 'q = %{x}<br>value <b>%{customdata[0]}</b><br>bracket [%{customdata[1]}, %{customdata[2]}]'
          + '<br>%{customdata[3]}<extra></extra>' },
    ], baseLayout({
      xaxis: { title: { text: 'q' }, range: [-0.02, 1.02], gridcolor: '#eef2f7', tickformat: '.2f' },
      yaxis: { title: { text: `value${$('q-log').checked ? ' (log scale)' : ''}` }, gridcolor: '#eef2f7',
        type: $('q-log').checked ? 'log' : 'linear' },
      hovermode: 'closest',
    }));
    const pick = (q) => items.find((it) => Math.abs(it.q - q) < 1e-9);
    $('q-summary').replaceChildren(...[0.5, 0.9, 0.99].map(pick).filter(Boolean).map((it) => el('span', {
      class: 'inline-stat', title: `bracket ${fmtInterval(it.bound)} · ${fmtGuarantee(it.bound)}`,
    }, el('b', { text: `p${Math.round(it.q * 100)}` }), ` ${fmtShort(it.estimate)} `,
    el('span', { class: 'muted', text: `[${fmtShort(it.bound.lower)}, ${fmtShort(it.bound.upper)}]` }))));
  }

  function answerLine(a, unit) {
    const b = a.bound || {};
    return [
      el('span', { class: 'result-value', text: fmtShort(a.estimate), 'data-estimate': a.estimate,
        title: `estimate ${fmtExact(a.estimate)}` }),
      ` ${unit} `,
      el('span', { class: 'muted', text: `between ${fmtExact(b.lower)} and ${fmtExact(b.upper)} · ${fmtGuarantee(b)} · ${b.method || ''}` }),
    ];
  }

  async function refreshFrequency(g) {
    const key = state.freqKey;
    const out = $('freq-result');
    if (!key) return;
    const r = await ask('frequency', { window: state.window, key });
    if (g !== state.gen || key !== state.freqKey) return;
    if (!r.ok) {
      out.dataset.kind = r.missing ? 'info' : 'error';
      out.replaceChildren(el('p', { class: 'note', 'data-kind': out.dataset.kind, text: problemText(r, 'Frequency') }));
      return;
    }
    out.dataset.kind = 'ok';
    out.replaceChildren(el('p', {}, el('b', { text: key }), ` in last ${fmtDuration(state.window)}: `,
      ...answerLine(r.body, UNITS.frequency)));
  }

  // ---- inner product --------------------------------------------------------------------------
  let ipKey = '';
  function renderIpPickers() {
    const names = [...state.streams.keys()];
    const key = names.join('\n');
    const a = $('ip-a');
    const b = $('ip-b');
    if (key !== ipKey) {
      ipKey = key;
      for (const sel of [a, b]) {
        const keep = sel.value;
        sel.replaceChildren(...names.map((n) => el('option', { value: n, text: n })));
        if (names.includes(keep)) sel.value = keep;
      }
    }
    if (!state.ip.a && state.selected) {
      // A: the chosen stream; B: another whose sketches have the same shape, if any.
      const sa = state.streams.get(state.selected);
      const same = (n) => {
        const o = state.streams.get(n).settings;
        return n !== sa.name && o.epsilon === sa.settings.epsilon && o.delta === sa.settings.delta
          && o.max_window === sa.settings.max_window && o.resolution === sa.settings.resolution;
      };
      const twin = names.find(same);
      state.ip.a = sa.name;
      state.ip.b = twin || names.find((n) => n !== sa.name) || sa.name;
      // Computed at once only when the pair can be answered; otherwise on "Compute".
      state.ip.asked = Boolean(twin);
      if (twin) refreshIp();
    }
    if (state.ip.a) a.value = state.ip.a;
    if (state.ip.b) b.value = state.ip.b;
  }

  async function refreshInnerProduct() {
    const { a, b } = state.ip;
    const out = $('ip-result');
    if (!state.ip.asked || !a || !b) return;
    const sa = state.streams.get(a);
    const sb = state.streams.get(b);
    if (!sa || !sb) return;
    const maxWindow = Math.min(sa.settings.max_window, sb.settings.max_window);
    const w = state.ip.window || maxWindow;
    if (w > maxWindow) {
      out.replaceChildren(el('p', { class: 'note', 'data-kind': 'error',
        text: `The window may be at most ${fmtDuration(maxWindow)} (the smaller max window of the two streams).` }));
      return;
    }
    const gone = knownMissing('inner-product');
    const r = gone ? { ok: false, status: gone.status, detail: gone.detail, missing: true }
      : await api('/v1/inner-product', { streams: `${a},${b}`, window: w });
    if (!r.ok && !gone && isMissing(r)) {
      missing.set('inner-product', { detail: r.detail, status: r.status, since: performance.now() });
      r.missing = true;
    }
    if (a !== state.ip.a || b !== state.ip.b) return;
    if (!r.ok) {
      out.replaceChildren(el('p', { class: 'note', 'data-kind': r.missing ? 'info' : 'error', text: problemText(r, 'Inner product') }));
      return;
    }
    out.replaceChildren(el('p', {}, el('b', { text: `${a} · ${b}` }), ` in last ${fmtDuration(w)}: `,
      ...answerLine(r.body, UNITS['inner-product'])));
  }
  const refreshIp = throttled(refreshInnerProduct, SLOW_PANEL_MS);

  // ---- decayed correlated sums ----------------------------------------------------------------
  const DECAY_KINDS = ['none', 'sliding', 'exponential', 'polynomial'];
  const DECAY_PARAM = { sliding: 'window', exponential: 'half_life', polynomial: 'alpha' };

  function decayLabel(d) {
    if (d.kind === 'none') return 'no decay';
    if (d.kind === 'sliding') return `sliding ${fmtDuration(d.window)}`;
    if (d.kind === 'exponential') return `exponential, half-life ${fmtDuration(d.half_life)}`;
    if (d.kind === 'polynomial') return `polynomial α=${d.alpha}`;
    return d.kind;
  }

  function fillDecayDefaults() {
    const s = current();
    if (!s) return;
    const declared = s.settings.decays || [];
    const find = (kind) => declared.find((d) => d.kind === kind);
    const poly = find('polynomial');
    const expo = find('exponential');
    const slide = find('sliding');
    $('decay-polynomial-param').value = poly ? poly.alpha : 1.5;
    $('decay-exponential-param').value = fmtDuration(expo ? expo.half_life : s.settings.max_window / 8);
    $('decay-sliding-param').value = fmtDuration(slide ? slide.window : state.window);
  }

  function chosenDecays() {
    const out = [];
    const problems = [];
    for (const kind of DECAY_KINDS) {
      if (!$(`decay-${kind}`).checked) continue;
      const d = { kind };
      if (kind !== 'none') {
        const input = $(`decay-${kind}-param`);
        const raw = input.value;
        const v = kind === 'polynomial' ? parseFloat(raw) : parseDuration(raw);
        if (!(v > 0) || !Number.isFinite(v)) {
          input.setAttribute('aria-invalid', 'true');
          problems.push(`${kind}: ${kind === 'polynomial' ? 'α must be a positive number' : 'use a duration such as 10m'}`);
          continue;
        }
        input.removeAttribute('aria-invalid');
        d[DECAY_PARAM[kind]] = v;
      }
      out.push(d);
    }
    return { decays: out, problems };
  }

  /** τ where the values are: at their quantiles over the longest window when the server
   * answers them, else evenly over the declared range. */
  async function tauGrid() {
    const s = current();
    const { value_min: lo, value_max: hi, max_window: maxWindow } = s.settings;
    const qs = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99];
    let taus = [];
    if (finite(s.status.clock) && !knownMissing('quantiles')) {
      const r = await ask('quantiles', { window: maxWindow, q: qs.join(',') });
      if (r.ok && r.body.items && r.body.items.length) {
        taus = r.body.items.map((it) => +it.estimate.toPrecision(3)).filter((t) => t > lo && t <= hi);
      }
    }
    let how = `τ at the value quantiles q = ${qs[0]} … ${qs[qs.length - 1]} over the last ${fmtDuration(maxWindow)}, and at value_min`;
    if (taus.length < 3) {
      taus = [];
      for (let i = 1; i < TAU_POINTS; i += 1) taus.push(+(lo + ((hi - lo) * i) / (TAU_POINTS - 1)).toPrecision(10));
      how = 'τ evenly over the declared value range';
    }
    $('decay-caption').textContent = `${how}. Ages are counted from the stream's clock.`;
    return [...new Set([lo, ...taus])].sort((a, b) => a - b);
  }

  const refused = new Map(); // decayed-sum parameters (without τ) -> the 422 refusing them
  const refreshDecay = throttled(async () => {
    if (!state.selected) return;
    const g = state.gen;
    const note = $('decay-note');
    const refusals = $('decay-refusals');
    const gone = knownMissing('decayed-sum');
    if (gone) {
      showNote(note, problemText({ ...gone, missing: true }, 'The decayed sum'));
      refusals.replaceChildren();
      showChart('decay-chart', false);
      return;
    }
    if (!hasValues()) {
      showNote(note, 'This stream declares no value range (value_min, value_max): the predicate value ≥ τ needs one.');
      refusals.replaceChildren();
      $('decay-caption').textContent = '';
      showChart('decay-chart', false);
      return;
    }
    const { decays, problems } = chosenDecays();
    if (!decays.length) {
      showNote(note, problems.length ? problems.join('; ') : 'Choose at least one decay.', problems.length ? 'error' : 'info');
      refusals.replaceChildren();
      emptyPlot('decay-chart', 'no decay chosen');
      return;
    }
    const guarantee = $('decay-guarantee').value;
    const paramsOf = (d) => {
      const params = { decay: d.kind, guarantee };
      if (d.kind !== 'none') params[DECAY_PARAM[d.kind]] = d[DECAY_PARAM[d.kind]];
      return params;
    };
    const lo = current().settings.value_min;
    // One question first: a server without decayed sums is asked once, not once per curve.
    const firstKey = JSON.stringify(paramsOf(decays[0]));
    const probe = refused.get(firstKey) || await ask('decayed-sum', { ...paramsOf(decays[0]), tau: lo });
    if (g !== state.gen) return;
    if (probe.missing) {
      showNote(note, problemText(probe, 'The decayed sum'));
      refusals.replaceChildren();
      showChart('decay-chart', false);
      return;
    }
    const taus = await tauGrid();
    if (g !== state.gen) return;
    const curves = await Promise.all(decays.map(async (d, i) => {
      const params = paramsOf(d);
      // A refused guarantee is refused whatever the data: not asked again on live updates.
      const key = JSON.stringify(params);
      if (refused.has(key)) return { decay: d, error: refused.get(key) };
      // The lowest τ first: a refusal answers the same for every τ.
      const first = i === 0 ? probe : await ask('decayed-sum', { ...params, tau: taus[0] });
      if (!first.ok && first.status === 422) refused.set(key, first);
      if (!first.ok) return { decay: d, error: first };
      const rest = await Promise.all(taus.slice(1).map((tau) => ask('decayed-sum', { ...params, tau })));
      const bad = rest.find((r) => !r.ok);
      if (bad) return { decay: d, error: bad };
      return { decay: d, answers: [first, ...rest].map((r) => r.body) };
    }));
    if (g !== state.gen) return;
    showNote(note, problems.join('; '), problems.length ? 'error' : 'info');
    refusals.replaceChildren(...curves.filter((c) => c.error).map((c) => el('li', { 'data-kind': c.decay.kind },
      el('b', { text: `${decayLabel(c.decay)}${guarantee ? `, ${guarantee}` : ''}: ` }),
      `refused — ${c.error.detail}${c.error.status === 422 ? '' : ` (HTTP ${c.error.status})`}`)));
    const traces = [];
    for (const c of curves) {
      if (!c.answers) continue;
      const color = COLORS[c.decay.kind] || '#334155';
      const name = `${decayLabel(c.decay)} — ${fmtGuarantee(c.answers[0].bound)}`;
      const x = c.answers.map((a, i) => (finite(a.tau) ? a.tau : taus[i]));
      traces.push(...bandTraces(x, c.answers.map((a) => a.bound.lower), c.answers.map((a) => a.bound.upper), color, name, name));
      traces.push({
        type: 'scatter', mode: 'lines+markers', name, legendgroup: name, x, y: c.answers.map((a) => a.estimate),
        line: { color, width: 2 }, marker: { size: 5, color },
        customdata: c.answers.map((a) => [fmtExact(a.estimate), fmtExact(a.bound.lower), fmtExact(a.bound.upper),
          fmtGuarantee(a.bound), a.bound.method || '']),
        hovertemplate: `<b>${decayLabel(c.decay)}</b><br>τ = %{x}<br>sum <b>%{customdata[0]}</b> ${UNITS['decayed-sum']}`
          + '<br>bound [%{customdata[1]}, %{customdata[2]}]<br>%{customdata[3]} · %{customdata[4]}<extra></extra>',
      });
    }
    if (!traces.length) { emptyPlot('decay-chart', 'every chosen decay was refused'); return; }
    draw('decay-chart', traces, baseLayout({
      showlegend: true, legend: { orientation: 'h', y: -0.22, x: 0, font: { size: 12 } },
      margin: { l: 64, r: 16, t: 12, b: 40 },
      xaxis: { title: { text: 'τ (events with value ≥ τ)' }, gridcolor: '#eef2f7' },
      yaxis: { title: { text: `decayed sum of weight (${UNITS['decayed-sum']})` }, rangemode: 'tozero', gridcolor: '#eef2f7' },
      hovermode: 'closest',
    }));
  }, DECAY_PANEL_MS);

  // ---- alerts ---------------------------------------------------------------------------------
  const refreshAlerts = throttled(async () => {
    const note = $('alerts-note');
    const body = $('alerts-table').querySelector('tbody');
    const gone = knownMissing('alerts');
    const r = gone ? { ok: false, status: gone.status, detail: gone.detail, missing: true } : await api('/v1/alerts');
    if (!r.ok && !gone && (r.status === 404 || r.status === 405 || r.status === 501)) {
      missing.set('alerts', { detail: r.detail, status: r.status, since: performance.now() });
      r.missing = true;
    }
    if (!r.ok) {
      showNote(note, problemText(r, 'Alerts'), r.missing ? 'info' : 'error');
      $('alerts-table').hidden = true;
      return;
    }
    let rules = r.body.alerts || [];
    const onlyMine = $('alerts-only-stream').checked;
    if (onlyMine) rules = rules.filter((a) => a.stream === state.selected);
    $('alerts-table').hidden = rules.length === 0;
    showNote(note, rules.length ? '' : (onlyMine ? 'No alert rule watches this stream.' : 'No alert rule yet.'));
    body.replaceChildren(...rules.map((a) => {
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
    }));
  }, ALERTS_MS);

  // ---- live updates -----------------------------------------------------------------------------
  let source = null;
  let everOpened = false;
  let retryMs = 1000;

  function setLive(kind, text) {
    const node = $('live-status');
    node.dataset.state = kind;
    node.textContent = text;
  }
  function reachable(ok) {
    if (ok && $('live-status').dataset.state === 'offline') setLive('reconnecting', 'reconnecting…');
  }
  function liveText() {
    return state.lastLive ? `live · last update ${new Date(state.lastLive).toLocaleTimeString('en-GB')}` : 'live';
  }

  function connectLive() {
    if (source) source.close();
    source = new EventSource('/v1/live');
    source.onopen = () => {
      retryMs = 1000;
      setLive('live', liveText());
      if (everOpened) onReconnected();
      everOpened = true;
    };
    source.onmessage = (event) => {
      let note;
      try { note = JSON.parse(event.data); } catch (err) { return; }
      if (note && typeof note.stream === 'string') onAnnouncement(note);
    };
    source.onerror = () => {
      setLive('offline', 'reconnecting to the API…');
      if (source.readyState === EventSource.CLOSED) {
        // The browser gave up (e.g. a proxy answered 502): try again ourselves, backing off.
        source.close();
        setTimeout(connectLive, retryMs);
        retryMs = Math.min(retryMs * 2, 15000);
      }
    };
  }

  function onAnnouncement(note) {
    state.lastLive = Date.now();
    setLive('live', liveText());
    const s = state.streams.get(note.stream);
    if (!s) { loadStreamsSoon(); return; }
    if (finite(note.sketch_version) && note.sketch_version > (s.status.sketch_version || 0)) {
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

  const loadStreamsSoon = throttled(loadStreams, 2000);

  // ---- plumbing -------------------------------------------------------------------------------
  /** Run ``fn`` at most once per ``gap`` ms, never twice at once; calls in between coalesce.
   * ``.now()`` runs it as soon as the running call (if any) ends. */
  function throttled(fn, gap) {
    let last = -Infinity;
    let timer = null;
    let running = false;
    let again = false;
    async function run() {
      timer = null;
      if (running) { again = true; return; }
      running = true;
      last = performance.now();
      try { await fn(); } catch (err) { setBanner(`Dashboard error: ${err && err.message ? err.message : err}`); }
      running = false;
      if (again) { again = false; trigger(); }
    }
    function trigger() {
      if (timer !== null) return;
      if (running) { again = true; return; }
      timer = setTimeout(run, Math.max(0, last + gap - performance.now()));
    }
    trigger.now = () => {
      if (timer !== null) clearTimeout(timer);
      timer = null;
      last = -Infinity;
      trigger();
    };
    return trigger;
  }

  function setBanner(text) {
    let node = $('banner');
    if (!text) { if (node) node.remove(); return; }
    if (!node) {
      node = el('div', { id: 'banner', class: 'banner', role: 'alert' });
      document.body.prepend(node);
    }
    node.textContent = text;
  }

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
    wire();
    for (const q of ['count', 'sum', 'distinct', 'self-join']) renderTile(q, null);
    connectLive();
    discover().finally(loadStreams);
  }

  // For tests and for the curious: the dashboard's state, read-only by convention.
  window.tidemark = { state, missing, refresh: () => onReconnected() };

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
