/* The stream picker (with its filter) in the sidebar. */
import { $, el } from './dom.js';
import { compactFmt, fmtInt } from './format.js';
import { renderIpPickers } from './inner-product.js';
import { state, throttled } from './state.js';

let pickerKey = '';

function optionText(s) {
  const st = s.status || {};
  const n = st.events || 0;
  return `${s.name} — ${n >= 1e5 ? compactFmt.format(n) : fmtInt(n)} ev · v${st.sketch_version ?? 0}`;
}

export function renderPicker() {
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

export const renderPickerSoon = throttled(async () => renderPicker(), 500);
