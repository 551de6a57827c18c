/* /v1/live (server-sent events): one announcement per published sketch version. The badge
 * in the top bar says whether the page is live; a lost connection is retried with backoff.
 * EventSource is same-origin, so the sign-in cookie goes with it. */
import { $ } from './dom.js';
import { state } from './state.js';

let source = null;
let everOpened = false;
let retryMs = 1000;

export function setLive(kind, text) {
  const node = $('live-status');
  node.dataset.state = kind;
  node.textContent = text;
}

/** An answer came back: if the badge said offline, the API is back. */
export function reachable() {
  if ($('live-status').dataset.state === 'offline') setLive('reconnecting', 'reconnecting…');
}

function liveText() {
  return state.lastLive ? `live · last update ${new Date(state.lastLive).toLocaleTimeString('en-GB')}` : 'live';
}

/** Follow /v1/live: ``onAnnouncement(note)`` per message, ``onReconnected()`` after a loss. */
export function connectLive(onAnnouncement, onReconnected) {
  if (source) source.close();
  source = new EventSource('/v1/live');
  source.onopen = () => {
    retryMs = 1000;
    setLive('live', liveText());
    if (everOpened) onReconnected();
    everOpened = true;
  };
  source.onmessage = (event) => {
    let note;
    try { note = JSON.parse(event.data); } catch (err) { return; }
    if (note && typeof note.stream === 'string') {
      state.lastLive = Date.now();
      setLive('live', liveText());
      onAnnouncement(note);
    }
  };
  source.onerror = () => {
    setLive('offline', 'reconnecting to the API…');
    if (source.readyState === EventSource.CLOSED) {
      // The browser gave up (e.g. a proxy answered 502): try again ourselves, backing off.
      source.close();
      setTimeout(() => connectLive(onAnnouncement, onReconnected), retryMs);
      retryMs = Math.min(retryMs * 2, 15000);
    }
  };
}
