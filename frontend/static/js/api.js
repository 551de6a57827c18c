/* The API client: GET with a cap on parallel requests, never throwing, and the memory of
 * which queries the server lacks (404, or 422 "unknown query"), asked again after a while.
 *
 * Requests are same-origin with credentials: the dashboard signs in with an HttpOnly cookie
 * (contract §9), so no key ever passes through this code. */
import { enc } from './format.js';
import { state } from './state.js';

const MAX_PARALLEL = 4;          // browsers keep 6 connections per host; one is /v1/live
const PROBE_AGAIN_MS = 60000;    // ask a missing query again after this

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

let reachableHook = () => {};
/** Called after every successful answer (the live badge leaves "offline"). */
export function onReachable(fn) { reachableHook = fn; }

/** GET a JSON endpoint. Never throws: {ok, status, body, detail}. */
export function api(path, params = {}) {
  const url = new URL(path, window.location.origin);
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') url.searchParams.set(k, String(v));
  }
  return limited(async () => {
    let res;
    try {
      res = await fetch(url, { headers: { Accept: 'application/json' }, cache: 'no-store', credentials: 'same-origin' });
    } catch (err) {
      return { ok: false, status: 0, body: null, detail: 'the API is unreachable' };
    }
    let body = null;
    try { body = await res.json(); } catch (err) { body = null; }
    let detail = res.statusText;
    if (body && body.detail !== undefined) {
      detail = typeof body.detail === 'string' ? body.detail : JSON.stringify(body.detail);
    }
    if (res.ok) reachableHook();
    return { ok: res.ok, status: res.status, body, detail };
  });
}

/** Queries the server does not know yet: name -> {detail, status, since}. */
export const missing = new Map();
export function isMissing(r) {
  return (r.status === 404 && (!r.detail || r.detail === 'Not Found'))
    || r.status === 405 || r.status === 501
    || (r.status === 422 && /^unknown query/i.test(r.detail || ''));
}
export function knownMissing(query) {
  const m = missing.get(query);
  if (!m) return null;
  if (performance.now() - m.since > PROBE_AGAIN_MS) { missing.delete(query); return null; }
  return m;
}
/** Remember that the server lacks ``query`` (after answer ``r``); marks ``r`` as such. */
export function noteMissing(query, r) {
  missing.set(query, { detail: r.detail, status: r.status, since: performance.now() });
  r.missing = true;
}
/** The answer to give without asking, for a query known to be missing. */
export const missingAnswer = (gone) => ({ ok: false, status: gone.status, detail: gone.detail, missing: true });

/* The query kinds the server answers, from its registry (GET /v1/kinds); null until
 * discovered, and for a server without that route (each kind is then asked, and its 404 or
 * "unknown query" says which it lacks). */
let listed = null;

/** ``knownMissing`` for a query kind: missing too when the server's kinds do not list it. */
export function kindMissing(kind) {
  if (listed && !listed.has(kind) && !missing.has(kind)) {
    missing.set(kind, { status: 422, since: performance.now(),
      detail: `unknown query '${kind}'; the server's kinds (GET /v1/kinds): ${[...listed].join(', ')}` });
  }
  return knownMissing(kind);
}

/** Learn which query kinds the server answers (GET /v1/kinds) and which routes it has
 * (its OpenAPI description), so missing ones are not even asked. */
export async function discover() {
  const [r, k] = await Promise.all([api('/openapi.json'), api('/v1/kinds')]);
  listed = k.ok && k.body && Array.isArray(k.body.kinds) ? new Set(k.body.kinds.map((x) => x.name)) : null;
  if (!r.ok || !r.body || !r.body.paths) return;
  const paths = r.body.paths;
  const since = performance.now();
  const note = (query, path) => missing.set(query, { status: 404, since,
    detail: `the server has no ${path} endpoint` });
  if (!paths['/v1/inner-product']) note('inner-product', 'GET /v1/inner-product');
  if (!paths['/v1/alerts']) note('alerts', 'GET /v1/alerts');
  if (!paths['/v1/streams/{name}/{query}/history']) note('history', 'GET /v1/streams/{name}/{query}/history');
}

/** Ask one query of the selected stream, remembering the ones the server lacks. */
export async function ask(query, params, stream = state.selected) {
  const gone = kindMissing(query);
  if (gone) return missingAnswer(gone);
  const r = await api(`/v1/streams/${enc(stream)}/${query}`, params);
  if (!r.ok && isMissing(r)) noteMissing(query, r);
  return r;
}

/** Ask a query's history: its answers at instants across max_window (one request). */
export async function askHistory(query, params, stream = state.selected) {
  const gone = knownMissing('history') || kindMissing(query);
  if (gone) return missingAnswer(gone);
  const r = await api(`/v1/streams/${enc(stream)}/${query}/history`, params);
  if (!r.ok && isMissing(r)) noteMissing(r.status === 422 ? query : 'history', r);
  return r;
}

export function problemText(r, what) {
  if (r.missing) return `${what} is not available on this server yet (HTTP ${r.status}: ${r.detail}).`;
  if (r.status === 0) return `${what}: the API is unreachable; retrying when it is back.`;
  return `${what}: ${r.detail} (HTTP ${r.status})`;
}
