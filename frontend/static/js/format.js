/* Numbers, durations, times and bounds as text: pure functions, no DOM. */

export const finite = (x) => typeof x === 'number' && Number.isFinite(x);
export const enc = encodeURIComponent;

const exactFmt = new Intl.NumberFormat('en-US', { maximumFractionDigits: 6 });
const tileFmt = new Intl.NumberFormat('en-US', { maximumFractionDigits: 2 });
export const compactFmt = new Intl.NumberFormat('en-US', { notation: 'compact', maximumSignificantDigits: 4 });
const intFmt = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });

/** Every digit the API gave (hover text, tooltips). */
export function fmtExact(x) {
  if (x === null || x === undefined) return '—';
  if (!finite(x)) return String(x);
  if (x !== 0 && (Math.abs(x) >= 1e15 || Math.abs(x) < 1e-6)) return x.toExponential(6);
  return exactFmt.format(x);
}
/** Readable at a glance: separators, two decimals at most, compact above a billion. */
export function fmtShort(x) {
  if (x === null || x === undefined) return '—';
  if (!finite(x)) return String(x);
  if (Math.abs(x) >= 1e9) return compactFmt.format(x);
  if (x !== 0 && Math.abs(x) < 0.01) return x.toPrecision(3);
  return tileFmt.format(x);
}
export const fmtInt = (x) => (finite(x) ? intFmt.format(x) : '—');
/** Plotly reads a few HTML tags in its texts: keys (user data) are shown, never parsed. */
export const plotlyText = (t) => String(t).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

export function fmtBytes(n) {
  if (!finite(n)) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${i === 0 ? n : n.toFixed(n < 10 ? 2 : 1)} ${units[i]}`;
}

const DURATION = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$/;
const UNIT_SECONDS = { ms: 0.001, s: 1, m: 60, h: 3600, d: 86400, w: 604800 };
/** Seconds from "45s", "30m", "12h", "7d" or a plain number of seconds (as the API). */
export function parseDuration(raw) {
  const m = DURATION.exec(String(raw));
  if (!m) return null;
  const seconds = parseFloat(m[1]) * UNIT_SECONDS[m[2] || 's'];
  return Number.isFinite(seconds) && seconds > 0 ? seconds : null;
}
export function fmtDuration(seconds) {
  if (!finite(seconds)) return '—';
  for (const [unit, size] of [['w', 604800], ['d', 86400], ['h', 3600], ['m', 60]]) {
    if (seconds >= size && Math.abs(seconds / size - Math.round(seconds / size)) < 1e-9) {
      return `${Math.round(seconds / size)}${unit}`;
    }
  }
  if (seconds >= 1) return `${+seconds.toFixed(3)}s`;
  return `${+(seconds * 1000).toFixed(3)}ms`;
}
export function fmtAge(seconds) {
  if (!finite(seconds)) return '—';
  if (seconds < 1) return 'just now';
  if (seconds < 90) return `${Math.round(seconds)} s ago`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 129600) return `${Math.round(seconds / 3600)} h ago`;
  return `${Math.round(seconds / 86400)} d ago`;
}
/** Event time (Unix seconds) as a UTC date string Plotly reads as is. */
export function isoUtc(at) {
  return new Date(at * 1000).toISOString().replace('T', ' ').replace('Z', '');
}
export const fmtClock = (at) => (finite(at) ? `${isoUtc(at).replace(/\.000$/, '')} UTC` : 'no events yet');

function fmtConfidence(c) {
  if (!finite(c)) return '';
  return c >= 1 ? 'deterministic' : `${+(c * 100).toPrecision(4)}% confidence`;
}
/** "relative ε 5% · deterministic" — the guarantee of a bound, in words. */
export function fmtGuarantee(bound) {
  if (!bound) return '';
  if (finite(bound.lower) && bound.lower === bound.upper) return 'exact';
  const eps = finite(bound.epsilon)
    ? (bound.kind === 'relative' ? `±${+(bound.epsilon * 100).toPrecision(3)}%` : `ε ${fmtExact(bound.epsilon)}`)
    : '';
  return [`${bound.kind || '?'} ${eps}`.trim(), fmtConfidence(bound.confidence)].filter(Boolean).join(' · ');
}
export const fmtInterval = (b, f = fmtExact) => (b ? `[${f(b.lower)}, ${f(b.upper)}]` : '');

/** A decay function in words ("polynomial α=1.5"). */
export function decayLabel(d) {
  if (d.kind === 'none') return 'no decay';
  if (d.kind === 'sliding') return `sliding ${fmtDuration(d.window)}`;
  if (d.kind === 'exponential') return `exponential, half-life ${fmtDuration(d.half_life)}`;
  if (d.kind === 'polynomial') return `polynomial α=${d.alpha}`;
  return d.kind;
}
