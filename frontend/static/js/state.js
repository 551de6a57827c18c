/* The dashboard's state, its shared settings, and the throttle every refresh goes through. */
import { setBanner } from './dom.js';

export const COALESCE_MS = 250;     // at most one status/count/sum refresh per this
export const SLOW_PANEL_MS = 1000;  // heavy hitters, quantiles, distinct, self-join, frequency
export const DECAY_PANEL_MS = 2000; // the decayed-sum sweep asks one query per tau and decay
export const ALERTS_MS = 2000;
export const LIST_POLL_MS = 10000;  // the full stream list (new streams, event counts)
export const ALERTS_POLL_MS = 10000;

export const COLORS = {
  count: '#2563eb', sum: '#0f766e', hh: '#7c3aed', quantiles: '#c2410c',
  none: '#475569', sliding: '#2563eb', exponential: '#dc2626', polynomial: '#15803d',
  'finite-exponential': '#b45309',
};
export const UNITS = {
  count: 'events', sum: 'weight', distinct: 'keys', 'self-join': 'Σ freq²',
  frequency: 'events', 'inner-product': 'Σ freqA·freqB', 'decayed-sum': 'weight',
};
export const TITLES = { count: 'Count', sum: 'Sum of weight', distinct: 'Distinct keys', 'self-join': 'Self-join size' };

export const state = {
  streams: new Map(),     // name -> {name, settings, status}
  listed: false,          // whether `streams` holds the whole list yet
  selected: null,
  windowWanted: null,     // seconds asked by the user (kept across streams when it fits)
  window: null,           // seconds in use for the selected stream
  gen: 0,                 // bumped on stream/window change: older answers are dropped
  history: { count: [], sum: [] },
  backfill: null,         // the time charts' history: null, 'running', 'done' or 'unavailable'
  latest: {},             // query -> last answer body for the selected stream
  phi: 0.01,
  freqKey: '',
  ip: { a: null, b: null, window: null },
  lastLive: null,
};

export function current() { return state.streams.get(state.selected) || null; }

export function hasValues() {
  const s = current();
  return s && s.settings.value_min !== null && s.settings.value_min !== undefined;
}

/** Run ``fn`` at most once per ``gap`` ms, never twice at once; calls in between coalesce.
 * ``.now()`` runs it as soon as the running call (if any) ends. */
export function throttled(fn, gap) {
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
