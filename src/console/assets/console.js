/* idem console: a small hash-routed page over the console's JSON API. No framework, no build step:
 * ES modules the console's server serves as they are. This one starts the page: the cell picker,
 * the live counters and the views. */
/* global document, window, location, URL */
import { api, currentCell, selectCell } from './api.js';
import { h } from './dom.js';
import { connectLive } from './live.js';
import { defineRoutes, route } from './router.js';
import { renderInbox } from './views/inbox.js';
import { renderOutbox } from './views/outbox.js';
import { renderRequest } from './views/request.js';
import { renderRequests } from './views/requests.js';
import { renderSagas } from './views/sagas.js';
import { renderTasks } from './views/tasks.js';
import { renderTrace } from './views/trace.js';
import { renderWebhooks } from './views/webhooks.js';

defineRoutes(
  {
    requests: renderRequests,
    request: renderRequest,
    outbox: renderOutbox,
    inbox: renderInbox,
    webhooks: renderWebhooks,
    tasks: renderTasks,
    sagas: renderSagas,
    trace: renderTrace,
  },
  { request: 'requests' },
);

/** With cells, a selector: switching reads another database (counters, views, actions). */
async function loadCells() {
  const { cells } = await api('cells').catch(() => ({ cells: [] }));
  if (cells.length === 0) return;
  if (!cells.includes(currentCell())) selectCell(cells[0]);
  const picker = document.getElementById('cell-picker');
  const select = document.getElementById('cell');
  select.replaceChildren(...cells.map((name) => h('option', { value: name }, name)));
  select.value = currentCell();
  picker.hidden = false;
  select.addEventListener('change', () => {
    selectCell(select.value);
    const address = new URL(location.href);
    address.searchParams.set('cell', currentCell());
    window.history.replaceState(null, '', address);
    connectLive();
    void route();
  });
}

window.addEventListener('hashchange', route);
void loadCells().then(() => {
  connectLive();
  return route();
});
