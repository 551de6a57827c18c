/* Frequency of one key, asked in the panel's form (or by clicking a heavy hitter). */
import { ask, problemText } from './api.js';
import { $, answerLine, el } from './dom.js';
import { fmtDuration } from './format.js';
import { UNITS, state } from './state.js';

export async function refreshFrequency(g) {
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
