/* Deleting the stream on view (contract §4), for admin keys only, after a confirmation
 * that asks for the stream's name (as `tidemark streams delete` does).
 *
 * The page learns what its key may do from GET /v1/access. The DELETE carries the header
 * X-Tidemark-Client: dashboard, which lets the sign-in cookie count for the admin scope: a
 * cross-site page cannot send a custom header without a CORS preflight, which the API
 * never grants. */
import { api } from './api.js';
import { $ } from './dom.js';
import { enc } from './format.js';
import { state } from './state.js';

let onDeleted = () => {};

/** Show the delete control when the key is an admin's; ``deleted(name)`` runs after a delete. */
export async function initLifecycle(deleted) {
  onDeleted = deleted;
  const r = await api('/v1/access');
  const admin = r.ok && r.body && (r.body.scopes || []).includes('admin');
  $('delete-stream').hidden = !admin;
  if (!admin) return;
  $('delete-stream').addEventListener('click', ask);
  $('delete-form').addEventListener('submit', confirmDelete);
  $('delete-cancel').addEventListener('click', () => $('delete-dialog').close());
  $('delete-confirm-name').addEventListener('input', (e) => {
    $('delete-confirm').disabled = e.target.value !== $('delete-dialog').dataset.stream;
  });
}

function ask() {
  const name = state.selected;
  if (!name) return;
  const dialog = $('delete-dialog');
  dialog.dataset.stream = name;
  $('delete-name').textContent = name;
  $('delete-confirm-name').value = '';
  $('delete-confirm').disabled = true;
  $('delete-error').textContent = '';
  dialog.showModal();
  $('delete-confirm-name').focus();
}

async function confirmDelete(event) {
  event.preventDefault();
  const dialog = $('delete-dialog');
  const name = dialog.dataset.stream;
  if ($('delete-confirm-name').value !== name) return;
  $('delete-confirm').disabled = true;
  let res;
  try {
    res = await fetch(`/v1/streams/${enc(name)}`, {
      method: 'DELETE', credentials: 'same-origin',
      headers: { Accept: 'application/json', 'X-Tidemark-Client': 'dashboard' },
    });
  } catch (err) {
    $('delete-error').textContent = 'The API is unreachable; nothing was deleted.';
    $('delete-confirm').disabled = false;
    return;
  }
  if (res.status !== 204) {
    let detail = res.statusText;
    try { detail = (await res.json()).detail || detail; } catch (err) { /* no body */ }
    $('delete-error').textContent = `Not deleted: ${detail} (HTTP ${res.status})`;
    $('delete-confirm').disabled = false;
    return;
  }
  dialog.close();
  onDeleted(name);
}
