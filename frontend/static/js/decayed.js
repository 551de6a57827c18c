/* Decayed correlated sum against τ: one curve per chosen decay, each labelled with the
 * guarantee the server gives, and the server's refusals (422) listed in its own words. */
import { ask, kindMissing, missingAnswer, problemText } from './api.js';
import { bandTraces, baseLayout, draw, emptyPlot, showChart } from './charts.js';
import { $, el, showNote } from './dom.js';
import { decayLabel, finite, fmtDuration, fmtExact, fmtGuarantee, parseDuration } from './format.js';
import { COLORS, DECAY_PANEL_MS, UNITS, current, hasValues, state, throttled } from './state.js';

export const DECAY_KINDS = ['none', 'sliding', 'exponential', 'polynomial'];
const DECAY_PARAM = { sliding: 'window', exponential: 'half_life', polynomial: 'alpha' };
const TAU_POINTS = 11;

const refused = new Map(); // decayed-sum parameters (without τ) -> the 422 refusing them

/** A new stream or window: refusals are asked again. */
export function resetDecay() { refused.clear(); }

export function fillDecayDefaults() {
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
  if (finite(s.status.clock) && !kindMissing('quantiles')) {
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

function hide(note, text, kind = 'info') {
  showNote(note, text, kind);
  $('decay-refusals').replaceChildren();
}

export const refreshDecay = throttled(async () => {
  if (!state.selected) return;
  const g = state.gen;
  const note = $('decay-note');
  const refusals = $('decay-refusals');
  const gone = kindMissing('decayed-sum');
  if (gone) {
    hide(note, problemText(missingAnswer(gone), 'The decayed sum'));
    showChart('decay-chart', false);
    return;
  }
  if (!hasValues()) {
    hide(note, 'This stream declares no value range (value_min, value_max): the predicate value ≥ τ needs one.');
    $('decay-caption').textContent = '';
    showChart('decay-chart', false);
    return;
  }
  const { decays, problems } = chosenDecays();
  if (!decays.length) {
    hide(note, problems.length ? problems.join('; ') : 'Choose at least one decay.', problems.length ? 'error' : 'info');
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
    hide(note, problemText(probe, 'The decayed sum'));
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
