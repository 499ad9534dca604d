/* The live counters above every view: pushed over Server-Sent Events, polled where there are none. */
/* global document, EventSource, setTimeout, clearTimeout */
import { api, base, cellQuery } from './api.js';
import { h } from './dom.js';
import { count, duration } from './format.js';

const counters = document.getElementById('counters');
const liveBadge = document.getElementById('live');

function card(title, route, metrics) {
  const alarm = metrics.some((m) => m.bad && m.value > 0);
  return h(
    'a',
    { class: `card${alarm ? ' card-alarm' : ''}`, href: route },
    h('span', { class: 'card-title' }, title),
    h(
      'span',
      { class: 'card-metrics' },
      metrics.map((m) =>
        h(
          'span',
          { class: `metric${m.bad && m.value > 0 ? ' metric-bad' : ''}`, dataset: { counter: m.id } },
          h('span', { class: 'metric-value' }, m.text !== undefined ? m.text : count(m.value)),
          h('span', { class: 'metric-label' }, m.label),
        ),
      ),
    ),
  );
}

function showSummary(s) {
  counters.replaceChildren(
    card('Requests', '#/requests?state=stuck', [
      { id: 'requests-pending', label: 'pending', value: s.requests.pending },
      { id: 'requests-stuck', label: 'stuck', value: s.requests.stuck, bad: true },
    ]),
    card('Outbox', '#/outbox', [
      { id: 'outbox-backlog', label: 'backlog', value: s.outbox.backlog },
      { id: 'outbox-lag', label: 'lag', value: s.outbox.lagMs || 0, text: duration(s.outbox.lagMs) },
      { id: 'outbox-dead', label: 'dead', value: s.outbox.dead, bad: true },
    ]),
    card('Inbox', '#/inbox', [{ id: 'inbox-dead', label: 'dead', value: s.inbox.dead, bad: true }]),
    card('Webhooks', '#/webhooks', [
      { id: 'receipts-backlog', label: 'backlog', value: s.receipts.backlog },
      { id: 'receipts-dead', label: 'dead', value: s.receipts.dead + s.deliveries.failed, bad: true },
      { id: 'entities-parked', label: 'parked', value: s.receipts.parked, bad: true },
    ]),
    card('Claims', '#/tasks', [
      { id: 'tasks-ready', label: 'ready', value: s.tasks.ready },
      { id: 'tasks-stuck', label: 'stuck', value: s.tasks.stuck, bad: true },
      { id: 'tasks-dead', label: 'dead', value: s.tasks.dead, bad: true },
    ]),
    card('Sagas', '#/sagas', [
      { id: 'sagas-running', label: 'running', value: s.sagas.running },
      { id: 'sagas-stuck', label: 'stuck', value: s.sagas.stuck + s.sagas.stalled, bad: true },
    ]),
  );
}

function setLive(state, text) {
  liveBadge.dataset.state = state;
  liveBadge.textContent = text;
}

let pollTimer;
function poll() {
  clearTimeout(pollTimer);
  api('summary')
    .then((s) => {
      showSummary(s);
      setLive('polling', `updated ${new Date(s.at).toLocaleTimeString()}`);
    })
    .catch((error) => setLive('down', `offline: ${error.message}`))
    .finally(() => {
      pollTimer = setTimeout(poll, 5000);
    });
}

let liveSource;
/** (Re)opens the stream of the selected cell's summary; a browser without EventSource polls. */
export function connectLive() {
  if (liveSource) liveSource.close();
  if (typeof EventSource !== 'function') return poll();
  const source = new EventSource(`${base}/api/live${cellQuery()}`);
  liveSource = source;
  source.addEventListener('summary', (event) => {
    const s = JSON.parse(event.data);
    showSummary(s);
    setLive('live', 'live');
  });
  source.addEventListener('failure', (event) =>
    setLive('down', `database: ${JSON.parse(event.data).message}`),
  );
  source.onerror = () => {
    // The browser reconnects by itself; say so meanwhile.
    setLive('down', 'reconnecting…');
  };
}
