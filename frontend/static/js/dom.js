/* DOM helpers shared by the panels. */
import { fmtExact, fmtGuarantee, fmtShort } from './format.js';

export const $ = (id) => document.getElementById(id);

/** A new element: attributes (`class`, `text`, `data-*`, others), then children. */
export function el(tag, attrs = {}, ...children) {
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
}

/** A panel's note: hidden when there is nothing to say. */
export function showNote(node, text, kind = 'info') {
  if (!text) { node.hidden = true; node.textContent = ''; return; }
  node.hidden = false;
  node.dataset.kind = kind;
  node.textContent = text;
}

/** The page-wide banner (an error the user should see); removed with ''. */
export function setBanner(text) {
  let node = $('banner');
  if (!text) { if (node) node.remove(); return; }
  if (!node) {
    node = el('div', { id: 'banner', class: 'banner', role: 'alert' });
    document.body.prepend(node);
  }
  node.textContent = text;
}

/** One answer in a sentence: the estimate, its unit, the bound and its guarantee. */
export function answerLine(a, unit) {
  const b = a.bound || {};
  return [
    el('span', { class: 'result-value', text: fmtShort(a.estimate), 'data-estimate': a.estimate,
      title: `estimate ${fmtExact(a.estimate)}` }),
    ` ${unit} `,
    el('span', { class: 'muted', text: `between ${fmtExact(b.lower)} and ${fmtExact(b.upper)} · ${fmtGuarantee(b)} · ${b.method || ''}` }),
  ];
}
