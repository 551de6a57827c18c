/* The head of the chosen stream: its title and settings, the window control, and the
 * location hash (#stream=NAME&window=DURATION) that keeps both across reloads. */
import { $, el } from './dom.js';
import { decayLabel, fmtDuration, fmtExact, parseDuration } from './format.js';
import { current, state } from './state.js';

export function renderHead() {
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

export function renderWindowControl() {
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

/** The window typed in the control, in seconds, or null after saying what is wrong. */
export function windowAsked() {
  const s = current();
  if (!s) return null;
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
    return null;
  }
  return seconds;
}

export function readHash() {
  const p = new URLSearchParams(window.location.hash.slice(1));
  return { stream: p.get('stream'), window: parseDuration(p.get('window') || '') };
}

export function writeHash() {
  const p = new URLSearchParams();
  if (state.selected) p.set('stream', state.selected);
  if (state.window) p.set('window', fmtDuration(state.window));
  const hash = `#${p.toString()}`;
  if (window.location.hash !== hash) window.history.replaceState(null, '', hash);
}
