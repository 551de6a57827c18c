/* Inner product of two streams (GET /v1/inner-product): two pickers, a window, a result. */
import { api, isMissing, kindMissing, missingAnswer, noteMissing, problemText } from './api.js';
import { $, answerLine, el } from './dom.js';
import { fmtDuration } from './format.js';
import { SLOW_PANEL_MS, UNITS, state, throttled } from './state.js';

let ipKey = '';

export function renderIpPickers() {
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
  if (!state.ip.a && state.selected && state.listed) {
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
  const gone = kindMissing('inner-product');
  const r = gone ? missingAnswer(gone) : await api('/v1/inner-product', { streams: `${a},${b}`, window: w });
  if (!r.ok && !gone && isMissing(r)) noteMissing('inner-product', r);
  if (a !== state.ip.a || b !== state.ip.b) return;
  if (!r.ok) {
    out.replaceChildren(el('p', { class: 'note', 'data-kind': r.missing ? 'info' : 'error', text: problemText(r, 'Inner product') }));
    return;
  }
  out.replaceChildren(el('p', {}, el('b', { text: `${a} · ${b}` }), ` in last ${fmtDuration(w)}: `,
    ...answerLine(r.body, UNITS['inner-product'])));
}

export const refreshIp = throttled(refreshInnerProduct, SLOW_PANEL_MS);
