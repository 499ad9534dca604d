/* idem console: a small hash-routed page over the console's JSON API. No framework, no build step.
 * Every value from the database is set with textContent (through `h`): stored bodies, keys and errors
 * are attacker-controlled, and nothing here ever parses them as markup. */
/* global document, window, location, fetch, URL, URLSearchParams, EventSource, setTimeout, clearTimeout, confirm */
'use strict';

(() => {
  const base = document.querySelector('meta[name="idem-console-base"]').getAttribute('content');
  const view = document.getElementById('view');
  const counters = document.getElementById('counters');
  const liveBadge = document.getElementById('live');
  const cellPicker = document.getElementById('cell-picker');
  const cellSelect = document.getElementById('cell');
  // The cell (database) every API call reads, kept in the page's address as ?cell=. '' without cells.
  let cell = new URLSearchParams(location.search).get('cell') || '';

  // ---------------------------------------------------------------- DOM helpers

  /** Creates an element. Strings and numbers become text nodes; null/false children are skipped. */
  function h(tag, props, ...children) {
    const el = document.createElement(tag);
    for (const [name, value] of Object.entries(props || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === 'class') el.className = value;
      else if (name === 'dataset') Object.assign(el.dataset, value);
      else if (name.startsWith('on')) el.addEventListener(name.slice(2), value);
      else if (name === 'href') el.setAttribute('href', safeHref(value));
      else el.setAttribute(name, String(value));
    }
    append(el, children);
    return el;
  }

  function append(el, children) {
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      el.append(child instanceof window.Node ? child : document.createTextNode(String(child)));
    }
    return el;
  }

  /** Only in-page links are ever built from data. */
  function safeHref(value) {
    return String(value).startsWith('#/') ? String(value) : '#/';
  }

  function link(route, params, ...children) {
    return h('a', { href: routeHref(route, params) }, ...children);
  }

  function routeHref(route, params) {
    const query = new URLSearchParams();
    for (const [k, v] of Object.entries(params || {}))
      if (v !== undefined && v !== null && v !== '') query.set(k, v);
    const text = query.toString();
    return `#/${route}${text ? `?${text}` : ''}`;
  }

  // ---------------------------------------------------------------- formatting

  function duration(ms) {
    if (ms === null || ms === undefined) return '—';
    const abs = Math.abs(ms);
    if (abs < 1000) return `${Math.round(abs)} ms`;
    const s = Math.floor(abs / 1000);
    if (s < 60) return `${s}s`;
    const m = Math.floor(s / 60);
    if (m < 60) return `${m}m ${s % 60}s`;
    const hours = Math.floor(m / 60);
    if (hours < 48) return `${hours}h ${m % 60}m`;
    return `${Math.floor(hours / 24)}d ${hours % 24}h`;
  }

  /** A timestamp as "3m 12s ago" / "in 20s", with the exact time on hover. */
  function when(iso) {
    if (!iso) return muted('—');
    const ms = Date.now() - Date.parse(iso);
    const text = ms >= 0 ? `${duration(ms)} ago` : `in ${duration(-ms)}`;
    return h('time', { datetime: iso, title: iso }, text);
  }

  function badge(text, kind) {
    return h('span', { class: `badge badge-${kind || text}` }, text);
  }

  function mono(text, extra) {
    return h('code', { class: `mono ${extra || ''}`, title: text }, text);
  }

  function count(n) {
    return typeof n === 'number' ? n.toLocaleString('en-US') : '—';
  }

  /** A stored body or JSON text: pretty JSON, text, or a hex dump, with its size. */
  function preview(p, label) {
    if (!p) return muted('none');
    const caption = `${label ? `${label} · ` : ''}${count(p.bytes)} bytes${p.encoding === 'hex' ? ' · binary (hex)' : ''}${
      p.truncated ? ' · truncated' : ''
    }`;
    return h(
      'figure',
      { class: 'preview' },
      h('figcaption', {}, caption),
      h('pre', { class: `code ${p.encoding}` }, p.json !== undefined ? p.json : p.text),
    );
  }

  /** A collapsed preview for table cells. */
  function details(summary, content) {
    return h('details', { class: 'cell-details' }, h('summary', {}, summary), content);
  }

  function headersTable(headers) {
    if (!headers || headers.length === 0) return muted('none');
    return h(
      'table',
      { class: 'kv' },
      h(
        'tbody',
        {},
        headers.map(([name, value]) =>
          h('tr', {}, h('th', {}, name), h('td', { class: value === '[redacted]' ? 'muted' : '' }, value)),
        ),
      ),
    );
  }

  /**
   * A table. `columns`: [{ title, cell(row) => node|string, class? }]. `rowClass(row)` marks rows
   * (stuck, dead). `empty`: text when there are no rows.
   */
  function table(columns, rows, options) {
    const opts = options || {};
    if (!rows || rows.length === 0)
      return h('p', { class: `empty ${opts.emptyKind || 'ok'}` }, opts.empty || 'Nothing here.');
    return h(
      'div',
      { class: 'table-wrap' },
      h(
        'table',
        { class: 'grid' },
        h(
          'thead',
          {},
          h(
            'tr',
            {},
            columns.map((c) => h('th', { class: c.class || '' }, c.title)),
          ),
        ),
        h(
          'tbody',
          {},
          rows.map((row) =>
            h(
              'tr',
              { class: opts.rowClass ? opts.rowClass(row) || '' : '' },
              columns.map((c) => h('td', { class: c.class || '' }, c.cell(row))),
            ),
          ),
        ),
      ),
    );
  }

  function section(title, note, ...content) {
    return h(
      'section',
      { class: 'panel' },
      h(
        'div',
        { class: 'panel-head' },
        h('h2', {}, title),
        note ? h('p', { class: 'panel-note' }, note) : null,
      ),
      ...content,
    );
  }

  /** A section title with an anchor id and, when there are any, a badge counting its rows. */
  function countedTitle(id, label, n, kind) {
    return h('span', { id }, `${label} `, n > 0 ? badge(String(n), kind) : null);
  }

  function stat(label, value, kind) {
    return h(
      'div',
      { class: `stat ${kind || ''}` },
      h('span', { class: 'stat-value' }, value),
      h('span', { class: 'stat-label' }, label),
    );
  }

  function errorText(text) {
    return text ? h('span', { class: 'error-text', title: text }, text) : muted('—');
  }

  function muted(text) {
    return h('span', { class: 'muted' }, text);
  }

  /** `text` in monospace, or a muted dash when there is none. */
  function monoOr(text) {
    return text ? mono(text) : muted('—');
  }

  /** A count, in the colour of `kind` (danger, warn) when there is any. */
  function flaggedCount(n, kind) {
    return n > 0 && kind ? h('span', { class: `${kind}-text` }, count(n)) : count(n);
  }

  /** A numeric column per state, counted from each row's `counts`; `flag(state)` colours a count. */
  function stateCountColumns(states, flag) {
    return states.map((state) => ({
      title: state,
      class: 'num',
      cell: (row) => flaggedCount(row.counts[state] || 0, flag(state)),
    }));
  }

  /** A stat per state, from `counts`; a count of the `alarm` state shows as danger. */
  function stateStats(states, counts, alarm) {
    return h(
      'div',
      { class: 'stats' },
      states.map((state) =>
        stat(state, count(counts[state] || 0), state === alarm && counts[state] > 0 ? 'danger' : ''),
      ),
    );
  }

  /** A message's body and headers, collapsed in a table cell. */
  function messageDetails(body, label, headers) {
    return details('show', h('div', {}, preview(body, label), h('h4', {}, 'Headers'), headersTable(headers)));
  }

  function flash(message, kind) {
    const el = h('div', { class: `flash flash-${kind || 'ok'}`, role: 'status' }, message);
    view.prepend(el);
    return el;
  }

  // ---------------------------------------------------------------- API

  async function api(path, params) {
    const query = new URLSearchParams();
    for (const [k, v] of Object.entries(params || {}))
      if (v !== undefined && v !== null && v !== '') query.set(k, v);
    if (cell) query.set('cell', cell);
    const text = query.toString();
    const response = await fetch(`${base}/api/${path}${text ? `?${text}` : ''}`, {
      headers: { accept: 'application/json' },
      credentials: 'same-origin',
    });
    return answer(response);
  }

  async function post(path, body) {
    const response = await fetch(`${base}/api/${path}${cellQuery()}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-idem-console': '1', accept: 'application/json' },
      credentials: 'same-origin',
      body: JSON.stringify(body),
    });
    return answer(response);
  }

  function cellQuery() {
    return cell ? `?cell=${encodeURIComponent(cell)}` : '';
  }

  async function answer(response) {
    const body = await response.json().catch(() => null);
    if (!response.ok) {
      const detail = body && body.detail ? body.detail : `HTTP ${response.status}`;
      throw new Error(detail);
    }
    return body;
  }

  // ---------------------------------------------------------------- routing

  let renderToken = 0;

  function parseRoute() {
    const hash = location.hash.replace(/^#\/?/, '');
    const [path, query] = hash.split('?');
    return { name: path || 'requests', params: Object.fromEntries(new URLSearchParams(query || '')) };
  }

  const views = {
    requests: renderRequests,
    request: renderRequest,
    outbox: renderOutbox,
    inbox: renderInbox,
    webhooks: renderWebhooks,
    tasks: renderTasks,
    sagas: renderSagas,
  };
  const tabOf = { request: 'requests' };

  async function route() {
    const { name, params } = parseRoute();
    const render = views[name] || renderRequests;
    const tab = tabOf[name] || (views[name] ? name : 'requests');
    for (const a of document.querySelectorAll('#tabs a')) a.classList.toggle('active', a.dataset.tab === tab);
    const token = ++renderToken;
    view.replaceChildren(h('p', { class: 'loading' }, 'Loading…'));
    try {
      const content = await render(params);
      if (token !== renderToken) return;
      view.replaceChildren(...[].concat(content));
    } catch (error) {
      if (token !== renderToken) return;
      view.replaceChildren(
        h('div', { class: 'flash flash-error', role: 'alert' }, `Could not load this view: ${error.message}`),
      );
    }
  }

  function reload() {
    return route();
  }

  // ---------------------------------------------------------------- views: requests

  const agePresets = [
    ['', 'Any age'],
    ['newerThan=15m', 'Last 15 minutes'],
    ['newerThan=1h', 'Last hour'],
    ['newerThan=24h', 'Last 24 hours'],
    ['olderThan=1h', 'Older than 1 hour'],
    ['olderThan=24h', 'Older than 24 hours'],
    ['olderThan=7d', 'Older than 7 days'],
  ];

  const tenantFilter = { name: 'tenant', label: 'Tenant', placeholder: 'exact tenant id' };

  function filterForm(fields, params, route) {
    const inputs = {};
    const form = h(
      'form',
      {
        class: 'filters',
        onsubmit: (event) => {
          event.preventDefault();
          const next = {};
          for (const [name, input] of Object.entries(inputs)) {
            const value = input.value.trim();
            if (name === 'age') {
              if (value) {
                const [k, v] = value.split('=');
                next[k] = v;
              }
            } else if (value) next[name] = value;
          }
          location.hash = routeHref(route, next);
        },
      },
      fields.map((f) => {
        let input;
        if (f.options) {
          input = h(
            'select',
            { name: f.name, id: `filter-${f.name}` },
            f.options.map(([value, label]) => h('option', { value }, label)),
          );
          input.value = f.name === 'age' ? ageValue(params) : params[f.name] || '';
        } else {
          input = h('input', {
            name: f.name,
            id: `filter-${f.name}`,
            placeholder: f.placeholder || '',
            autocomplete: 'off',
          });
          input.value = params[f.name] || '';
        }
        inputs[f.name] = input;
        return h('label', { class: 'field' }, h('span', {}, f.label), input);
      }),
      h(
        'div',
        { class: 'filter-actions' },
        h('button', { type: 'submit', class: 'btn btn-primary' }, 'Apply'),
        link(route, {}, 'Clear'),
      ),
    );
    return form;
  }

  function ageValue(params) {
    if (params.newerThan) return `newerThan=${params.newerThan}`;
    if (params.olderThan) return `olderThan=${params.olderThan}`;
    return '';
  }

  function stateBadge(row) {
    if (row.stuck) return badge('stuck', 'stuck');
    if (row.state === 'failed') return badge('refused', 'failed');
    return badge(row.state);
  }

  function lease(row) {
    if (row.state !== 'pending') return muted('—');
    if (!row.lockedUntil) return badge('no lease', 'stuck');
    const ms = Date.parse(row.lockedUntil) - Date.now();
    return ms > 0
      ? h('span', { title: row.lockedUntil }, `held, ${duration(ms)} left`)
      : h('span', { class: 'danger-text', title: row.lockedUntil }, `lapsed ${duration(-ms)} ago`);
  }

  const requestColumns = [
    { title: 'State', cell: stateBadge },
    { title: 'Tenant', cell: (r) => mono(r.tenant) },
    { title: 'Operation', cell: (r) => mono(r.operation) },
    {
      title: 'Key',
      cell: (r) =>
        link('request', { tenant: r.tenant, operation: r.operation, key: r.key }, mono(r.key, 'key')),
    },
    {
      title: 'HTTP',
      class: 'num',
      cell: (r) => (r.status === null ? muted('—') : String(r.status)),
    },
    { title: 'Fence', class: 'num', cell: (r) => String(r.fence) },
    { title: 'Lease', cell: lease },
    {
      title: 'Recovery point',
      cell: (r) => monoOr(r.recoveryPoint),
    },
    { title: 'Created', cell: (r) => when(r.createdAt) },
    { title: 'Completed', cell: (r) => when(r.completedAt) },
  ];
  const requestRowClass = (r) => (r.stuck ? 'row-stuck' : '');

  async function renderRequests(params) {
    const data = await api('requests', params);
    let next = data.next;
    const list = table(requestColumns, data.rows, {
      rowClass: requestRowClass,
      empty: 'No keyed requests match these filters.',
      emptyKind: 'neutral',
    });
    const more = next
      ? h(
          'button',
          {
            class: 'btn',
            type: 'button',
            id: 'load-more',
            onclick: async (event) => {
              const button = event.currentTarget;
              button.disabled = true;
              try {
                const page = await api('requests', { ...params, cursor: next });
                const rows = table(requestColumns, page.rows, { rowClass: requestRowClass });
                list.querySelector('tbody').append(...rows.querySelectorAll('tbody tr'));
                next = page.next;
                if (next) button.disabled = false;
                else button.remove();
              } catch (error) {
                button.disabled = false;
                flash(`Could not load more: ${error.message}`, 'error');
              }
            },
          },
          'Load more',
        )
      : null;
    const stuck = data.rows.filter((r) => r.stuck).length;
    return [
      section(
        'Keyed requests',
        'Every (tenant, operation, key) idem has seen, newest first. Filters match exactly.',
        filterForm(
          [
            tenantFilter,
            { name: 'operation', label: 'Operation', placeholder: 'exact operation' },
            {
              name: 'state',
              label: 'State',
              options: [
                ['', 'Any state'],
                ['pending', 'Pending'],
                ['stuck', 'Stuck (lease lapsed)'],
                ['completed', 'Completed'],
                ['failed', 'Refused'],
              ],
            },
            { name: 'age', label: 'Age', options: agePresets },
          ],
          params,
          'requests',
        ),
        stuck > 0
          ? h(
              'p',
              { class: 'callout callout-danger' },
              `${stuck} pending operation${stuck === 1 ? '' : 's'} on this page ${stuck === 1 ? 'has' : 'have'} a lapsed lease: the process died or gave up. A retry with the same key resumes from the recovery point.`,
            )
          : null,
        list,
        more ? h('div', { class: 'more' }, more) : null,
      ),
    ];
  }

  function facts(entries) {
    return h(
      'dl',
      { class: 'facts' },
      entries
        .filter(Boolean)
        .map(([term, value]) => h('div', { class: 'fact' }, h('dt', {}, term), h('dd', {}, value))),
    );
  }

  async function renderRequest(params) {
    let r;
    try {
      r = await api('requests/detail', {
        tenant: params.tenant,
        operation: params.operation,
        key: params.key,
      });
    } catch (error) {
      return [crumbs(params), h('div', { class: 'flash flash-error', role: 'alert' }, error.message)];
    }
    const leaseText =
      r.lease === 'none'
        ? muted('none')
        : r.lease === 'held'
          ? h('span', {}, `held until `, when(r.lockedUntil))
          : h('span', { class: 'danger-text' }, 'lapsed ', when(r.lockedUntil));
    const out = [crumbs(params)];
    out.push(
      section(
        h('span', {}, 'Request ', stateBadge(r)),
        null,
        r.stuck
          ? h(
              'p',
              { class: 'callout callout-danger', id: 'stuck-callout' },
              `Stuck: pending with ${r.lease === 'none' ? 'no lease' : `a lease that lapsed ${duration(-r.leaseRemainingMs)} ago`}. Its process died or gave up${
                r.recoveryPoint ? ` after step “${r.recoveryPoint}”` : ' before recording a step'
              }. ${
                r.completion
                  ? `The completer takes it over (fence ${r.fence} → ${r.fence + 1}) and resumes from there, as would a retry with the same key.`
                  : `A retry with the same key takes it over (fence ${r.fence} → ${r.fence + 1}) and resumes from there.`
              }`,
            )
          : null,
        r.completion && (r.completion.attempts > 0 || r.completion.giveUp)
          ? h(
              'p',
              { class: 'callout', id: 'completer-callout' },
              `The completer has tried ${r.completion.attempts} time${r.completion.attempts === 1 ? '' : 's'}${
                r.completion.lastError ? `; last error: ${r.completion.lastError}` : ''
              }. ${
                r.completion.giveUp
                  ? `An operator asked it to ${r.completion.giveUp === 'compensate' ? 'run its compensation' : 'end it failed'}.`
                  : `Next attempt ${r.completion.nextAttemptAt ?? 'soon'}; \`idem intents give-up\` decides for one that cannot complete.`
              }`,
            )
          : null,
        r.error
          ? h(
              'p',
              { class: 'callout callout-danger', id: 'failed-callout' },
              `Failed for good${r.errorStep ? ` at step “${r.errorStep}”` : ' between steps'}: ${r.error}. Every retry of this key gets this failure (IDEM_STEP_FAILED) and nothing runs again; the steps below say which external calls started.`,
            )
          : null,
        facts([
          ['Tenant', mono(r.tenant)],
          ['Operation', mono(r.operation)],
          ['Key', mono(r.key)],
          ['State', stateBadge(r)],
          ['Fingerprint', mono(r.fingerprint, 'wrap')],
          ['Fence', String(r.fence)],
          ['Lease', leaseText],
          ['Recovery point', r.recoveryPoint ? mono(r.recoveryPoint) : muted('none')],
          ['Created', when(r.createdAt)],
          ['Completed', when(r.completedAt)],
          ['Result expires', when(r.expiresAt)],
          ['Tombstone until', when(r.tombstoneUntil)],
          r.resource ? ['Resource', mono(`${r.resource.type} ${r.resource.id}`)] : null,
        ]),
      ),
    );
    if (r.response) {
      out.push(
        section(
          h(
            'span',
            {},
            'Stored response ',
            badge(`HTTP ${r.response.status}`, r.response.status < 400 ? 'completed' : 'failed'),
          ),
          'Replayed byte for byte to every retry of this key. Sensitive headers are redacted.',
          h(
            'div',
            { class: 'split' },
            h('div', {}, h('h3', {}, 'Headers'), headersTable(r.response.headers)),
            h('div', {}, h('h3', {}, 'Body'), preview(r.body, 'body')),
          ),
        ),
      );
    } else {
      out.push(
        section(
          'Stored result',
          r.state === 'pending'
            ? 'Nothing is stored until the operation completes.'
            : 'What a retry of this key receives.',
          preview(r.result, 'result'),
          r.body ? preview(r.body, 'body') : null,
        ),
      );
    }
    out.push(
      section(
        'Steps',
        'Recorded results of a multi-step operation; a resumed run skips these and reruns the next one with the same derived key.',
        table(
          [
            { title: '#', class: 'num', cell: (s) => String(r.steps.indexOf(s) + 1) },
            { title: 'Step', cell: (s) => mono(s.step) },
            { title: 'Fence', class: 'num', cell: (s) => String(s.fence) },
            { title: 'Recorded', cell: (s) => when(s.completedAt) },
            {
              title: 'Result',
              cell: (s) => details(s.result && s.result.json ? 'JSON' : 'value', preview(s.result)),
            },
          ],
          r.steps,
          { empty: 'No steps recorded.', emptyKind: 'neutral' },
        ),
      ),
    );
    return out;
  }

  function crumbs(params) {
    return h(
      'nav',
      { class: 'crumbs', 'aria-label': 'Breadcrumb' },
      link('requests', {}, 'Requests'),
      ' › ',
      link('requests', { tenant: params.tenant }, params.tenant || '?'),
      ' › ',
      link('requests', { tenant: params.tenant, operation: params.operation }, params.operation || '?'),
      ' › ',
      h('span', {}, params.key || '?'),
    );
  }

  // ---------------------------------------------------------------- views: outbox

  async function redrive(filter, describe) {
    if (!confirm(`Redrive ${describe}? Dead events become due again with their attempts reset.`)) return;
    try {
      const result = await post('outbox/redrive', filter);
      await reload();
      flash(
        `Redriven ${describe}: ${result.revived} revived, ${result.released} released from behind them.`,
        'ok',
      );
    } catch (error) {
      flash(`Redrive failed: ${error.message}`, 'error');
    }
  }

  function eventColumns(extra, trailing) {
    return [
      { title: 'Event', cell: (e) => h('code', { class: 'mono', title: e.id }, `…${e.id.slice(-12)}`) },
      { title: 'Topic', cell: (e) => mono(e.topic) },
      { title: 'Key', cell: (e) => mono(e.key) },
      { title: 'Type', cell: (e) => mono(e.type) },
      { title: 'Attempts', class: 'num', cell: (e) => String(e.attempts) },
      { title: 'Last error', cell: (e) => errorText(e.lastError) },
      ...extra,
      {
        title: 'Payload',
        cell: (e) => messageDetails(e.payload, 'payload', e.headers),
      },
      ...(trailing || []),
    ];
  }

  function nextAttempt(e) {
    if (!e.availableAt) return badge('parked', 'parked');
    return Date.parse(e.availableAt) <= Date.now() ? h('span', {}, 'due now') : when(e.availableAt);
  }

  async function renderOutbox(params) {
    const data = await api('outbox', params);
    const s = data.stats;
    return [
      section(
        'Outbox',
        'Events written in business transactions, waiting for the dispatcher.',
        h(
          'div',
          { class: 'stats' },
          stat('pending', count(s.pending)),
          stat('due now', count(s.due)),
          stat('retrying', count(s.retrying), s.retrying > 0 ? 'warn' : ''),
          stat('parked behind dead', count(s.parked), s.parked > 0 ? 'warn' : ''),
          stat('dead', count(s.dead), s.dead > 0 ? 'danger' : 'good'),
          stat(
            'lag (oldest pending)',
            duration(s.oldestPendingAgeMs),
            s.oldestPendingAgeMs > 60000 ? 'warn' : '',
          ),
          stat('published, retained', count(s.published)),
        ),
        table(
          [
            { title: 'Topic', cell: (t) => link('outbox', { topic: t.topic }, mono(t.topic)) },
            { title: 'Pending', class: 'num', cell: (t) => count(t.pending) },
            { title: 'Dead', class: 'num', cell: (t) => flaggedCount(t.dead, 'danger') },
            { title: 'Lag', cell: (t) => duration(t.oldestPendingAgeMs) },
          ],
          data.topics,
          { empty: 'No unpublished events.', emptyKind: 'ok' },
        ),
      ),
      section(
        countedTitle('outbox-dead', 'Dead letters', data.dead.length, 'dead'),
        'Events the dispatcher gave up on. Later events of the same key wait behind them (parked). Redrive makes them due again.',
        data.dead.length > 0
          ? h(
              'div',
              { class: 'actions' },
              h(
                'button',
                {
                  class: 'btn btn-danger',
                  type: 'button',
                  id: 'redrive-all',
                  onclick: () =>
                    redrive(
                      params.topic ? { topic: params.topic } : { all: true },
                      params.topic ? `every dead event of ${params.topic}` : 'every dead event',
                    ),
                },
                params.topic ? `Redrive all dead in ${params.topic}` : 'Redrive all dead events',
              ),
            )
          : null,
        table(
          eventColumns(
            [{ title: 'Dead since', cell: (e) => when(e.deadAt) }],
            [
              {
                title: '',
                cell: (e) =>
                  h(
                    'button',
                    {
                      class: 'btn btn-small',
                      type: 'button',
                      dataset: { redrive: e.id },
                      onclick: () => redrive({ id: e.id }, `event …${e.id.slice(-12)}`),
                    },
                    'Redrive',
                  ),
              },
            ],
          ),
          data.dead,
          { rowClass: () => 'row-dead', empty: 'No dead letters.' },
        ),
      ),
      section(
        'Retrying',
        'Pending events with failed attempts; the dispatcher backs off between them.',
        table(eventColumns([{ title: 'Next attempt', cell: nextAttempt }]), data.retrying, {
          rowClass: () => 'row-warn',
          empty: 'No event is failing.',
        }),
      ),
    ];
  }

  // ---------------------------------------------------------------- views: inbox

  async function renderInbox(params) {
    const data = await api('inbox', params);
    return [
      section(
        'Inbox consumers',
        'Processed message ids per consumer; duplicates were acknowledged without running the handler.',
        table(
          [
            { title: 'Consumer', cell: (c) => link('inbox', { consumer: c.consumer }, mono(c.consumer)) },
            { title: 'Processed', class: 'num', cell: (c) => count(c.processed) },
            { title: 'Duplicates', class: 'num', cell: (c) => count(c.duplicates) },
            { title: 'Dead', class: 'num', cell: (c) => flaggedCount(c.dead, 'danger') },
          ],
          data.consumers,
          { empty: 'No messages recorded yet.', emptyKind: 'neutral' },
        ),
      ),
      section(
        countedTitle('inbox-dead', 'Dead messages', data.dead.length, 'dead'),
        'Messages a consumer gave up on. A redelivery of the same id (from the broker’s dead-letter queue) runs the handler again.',
        table(
          [
            { title: 'Consumer', cell: (m) => mono(m.consumer) },
            { title: 'Message id', cell: (m) => mono(m.messageId, 'key') },
            { title: 'Attempts', class: 'num', cell: (m) => String(m.attempts) },
            { title: 'Last error', cell: (m) => errorText(m.lastError) },
            {
              title: 'Origin',
              cell: (m) => monoOr(m.origin),
            },
            { title: 'Dead since', cell: (m) => when(m.processedAt) },
            {
              title: 'Message',
              cell: (m) => messageDetails(m.payload, 'payload', m.headers),
            },
          ],
          data.dead,
          { rowClass: () => 'row-dead', empty: 'No dead messages.' },
        ),
      ),
    ];
  }

  // ---------------------------------------------------------------- views: webhooks

  const receiptStates = [
    'pending',
    'processing',
    'waiting',
    'applied',
    'superseded',
    'duplicate',
    'unhandled',
    'dead',
  ];

  function receiptColumns(extra) {
    return [
      { title: 'Source', cell: (r) => mono(r.source) },
      { title: 'Delivery id', cell: (r) => mono(r.deliveryId, 'key') },
      { title: 'Type', cell: (r) => monoOr(r.eventType) },
      { title: 'State', cell: (r) => badge(r.state) },
      { title: 'Attempts', class: 'num', cell: (r) => String(r.attempts) },
      ...extra,
      { title: 'Received', cell: (r) => when(r.receivedAt) },
      {
        title: 'Body',
        cell: (r) => messageDetails(r.body, 'body', r.headers),
      },
    ];
  }

  async function renderWebhooks(params) {
    const data = await api('webhooks', params);
    const deliveryStates = ['pending', 'delivering', 'delivered', 'failed', 'cancelled'];
    return [
      section(
        'Incoming webhook receipts',
        'Verified deliveries, deduplicated on (source, delivery id), processed after the answer.',
        table(
          [
            { title: 'Source', cell: (s) => link('webhooks', { source: s.source }, mono(s.source)) },
            ...stateCountColumns(receiptStates, (state) =>
              state === 'dead' ? 'danger' : state === 'superseded' ? 'warn' : undefined,
            ),
            { title: 'Lag', cell: (s) => duration(s.oldestPendingAgeMs) },
          ],
          data.sources,
          { empty: 'No receipts yet.', emptyKind: 'neutral' },
        ),
      ),
      section(
        countedTitle('receipts-dead', 'Dead receipts', data.dead.length, 'dead'),
        'Attempts exhausted or a permanent error. The processor’s redrive puts them back to pending.',
        table(receiptColumns([{ title: 'Last error', cell: (r) => errorText(r.lastError) }]), data.dead, {
          rowClass: () => 'row-dead',
          empty: 'No dead receipts.',
        }),
      ),
      section(
        'Stuck in processing',
        'Claimed by a worker whose lease ended: it died mid-way. Another worker takes them over.',
        table(receiptColumns([{ title: 'Lease ended', cell: (r) => when(r.nextAttemptAt) }]), data.stuck, {
          rowClass: () => 'row-stuck',
          empty: 'No stuck receipts.',
        }),
      ),
      section(
        countedTitle('entities-parked', 'Parked entities', data.parked.length, 'parked'),
        'Sequence entities whose later versions waited past the gap timeout for a missing one. They resume when it arrives, or when an operator skips it: idem webhooks skip --scope S --key K.',
        table(
          [
            { title: 'Entity', cell: (e) => mono(`${e.scope}/${e.key}`) },
            { title: 'Applied', class: 'num', cell: (e) => e.appliedVersion || '—' },
            { title: 'Missing', class: 'num', cell: (e) => e.missingVersion || '—' },
            { title: 'Waiting', class: 'num', cell: (e) => String(e.waiting) },
            { title: 'Lowest waiting', class: 'num', cell: (e) => e.lowestWaitingVersion || '—' },
            { title: 'Parked', cell: (e) => when(e.parkedAt) },
            { title: 'Reason', cell: (e) => errorText(e.reason) },
          ],
          data.parked,
          { rowClass: () => 'row-warn', empty: 'No parked entities.' },
        ),
      ),
      section(
        countedTitle('receipts-superseded', 'Superseded events', data.superseded.length, 'superseded'),
        'State events older than the version already applied to their entity: recorded, never applied.',
        table(
          receiptColumns([
            {
              title: 'Entity',
              cell: (r) => (r.entity ? mono(`${r.entity.scope || ''}/${r.entity.key}`) : '—'),
            },
            { title: 'Version', class: 'num', cell: (r) => (r.entity && r.entity.version) || '—' },
            { title: 'Applied', class: 'num', cell: (r) => r.appliedVersion || '—' },
          ]),
          data.superseded,
          { rowClass: () => 'row-muted', empty: 'No superseded events.', emptyKind: 'neutral' },
        ),
      ),
      section(
        'Unhandled',
        'No handler existed for their type when processed; redrive them once one does.',
        table(receiptColumns([]), data.unhandled, { empty: 'No unhandled receipts.', emptyKind: 'neutral' }),
      ),
      section(
        'Outgoing deliveries',
        'Webhooks this service sends. Endpoint secrets are never shown.',
        stateStats(deliveryStates, data.deliveries.counts, 'failed'),
        table(
          [
            { title: 'Message', cell: (d) => mono(d.messageId, 'key') },
            { title: 'Endpoint', cell: (d) => mono(d.endpointId) },
            { title: 'URL', cell: (d) => (d.url ? mono(d.url) : '—') },
            { title: 'Type', cell: (d) => (d.eventType ? mono(d.eventType) : '—') },
            { title: 'State', cell: (d) => badge(d.state, d.state === 'failed' ? 'dead' : 'parked') },
            { title: 'Attempts', class: 'num', cell: (d) => String(d.attempts) },
            {
              title: 'Last status',
              class: 'num',
              cell: (d) => (d.lastStatus === null ? '—' : String(d.lastStatus)),
            },
            { title: 'Last error', cell: (d) => errorText(d.lastError) },
            { title: 'Created', cell: (d) => when(d.createdAt) },
          ],
          data.failedDeliveries,
          { rowClass: () => 'row-dead', empty: 'No failed deliveries.' },
        ),
        data.disabledEndpoints.length > 0
          ? table(
              [
                { title: 'Disabled endpoint', cell: (e) => mono(e.id) },
                { title: 'URL', cell: (e) => mono(e.url) },
                { title: 'Reason', cell: (e) => errorText(e.reason) },
                { title: 'Since', cell: (e) => when(e.disabledAt) },
              ],
              data.disabledEndpoints,
              {},
            )
          : null,
      ),
    ];
  }

  // ---------------------------------------------------------------- views: claims

  const taskStates = ['ready', 'claimed', 'completed', 'dead'];

  function taskColumns(extra) {
    return [
      { title: 'Task', class: 'num', cell: (t) => `#${t.id}` },
      { title: 'Tenant', cell: (t) => mono(t.tenant) },
      { title: 'Queue', cell: (t) => mono(t.queue) },
      { title: 'Key', cell: (t) => mono(t.key, 'key') },
      { title: 'State', cell: (t) => badge(t.state) },
      { title: 'Attempts', class: 'num', cell: (t) => `${t.attempts} / ${t.maxAttempts}` },
      ...extra,
      { title: 'Payload', cell: (t) => details('show', preview(t.payload, 'payload')) },
    ];
  }

  async function renderTasks(params) {
    const data = await api('tasks', params);
    return [
      section(
        'Claims',
        'Tasks for polling workers: one per (tenant, queue, key), claimed with a lease and a fencing token.',
        filterForm(
          [tenantFilter, { name: 'queue', label: 'Queue', placeholder: 'exact queue' }],
          params,
          'tasks',
        ),
        table(
          [
            { title: 'Queue', cell: (q) => link('tasks', { ...params, queue: q.queue }, mono(q.queue)) },
            ...stateCountColumns(taskStates, (state) => (state === 'dead' ? 'danger' : undefined)),
            { title: 'Oldest due', cell: (q) => duration(q.oldestDueAgeMs) },
          ],
          data.queues,
          { empty: 'No tasks.', emptyKind: 'neutral' },
        ),
      ),
      section(
        countedTitle('tasks-stuck', 'Stuck claims', data.stuck.length, 'stuck'),
        'Claimed, but the lease ended without a heartbeat: the worker died or hangs. The next claim takes the task over with a higher fence; the old worker’s writes are refused.',
        table(
          taskColumns([
            { title: 'Worker', cell: (t) => (t.lockedBy ? mono(t.lockedBy) : '—') },
            { title: 'Fence', class: 'num', cell: (t) => String(t.fence) },
            { title: 'Lease ended', cell: (t) => h('span', { class: 'danger-text' }, when(t.visibleAt)) },
          ]),
          data.stuck,
          { rowClass: () => 'row-stuck', empty: 'No stuck claims.' },
        ),
      ),
      section(
        countedTitle('tasks-dead', 'Dead tasks', data.dead.length, 'dead'),
        'Attempts exhausted or a permanent error. Their dedupe key holds until they are swept.',
        table(
          taskColumns([
            { title: 'Last error', cell: (t) => errorText(t.lastError) },
            { title: 'Died', cell: (t) => when(t.finishedAt) },
          ]),
          data.dead,
          { rowClass: () => 'row-dead', empty: 'No dead tasks.' },
        ),
      ),
    ];
  }

  // ---------------------------------------------------------------- views: sagas

  /** Sagas are few and need their steps at a glance: one card each rather than a table row. */
  function sagaCards(rows, kind, empty) {
    if (rows.length === 0) return h('p', { class: 'empty ok' }, empty);
    return h(
      'div',
      { class: 'items' },
      rows.map((s) =>
        h(
          'article',
          { class: `item item-${kind}`, dataset: { saga: s.key } },
          h(
            'header',
            { class: 'item-head' },
            badge(s.status, s.status === 'stuck' ? 'stuck' : s.status),
            h('span', { class: 'item-title' }, mono(s.tenant), ' / ', mono(s.saga), ' / ', mono(s.key)),
            h(
              'span',
              { class: 'item-meta' },
              `cursor ${s.cursor} · fence ${s.fence} · idle ${duration(s.idleMs)}`,
            ),
          ),
          s.stuckError || s.error
            ? h('p', { class: 'item-error' }, errorText(s.stuckError || s.error))
            : null,
          s.stuckError && s.error
            ? h('p', { class: 'muted small item-cause' }, `Turned back after: ${s.error}`)
            : null,
          table(
            [
              { title: '#', class: 'num', cell: (st) => String(st.position) },
              { title: 'Step', cell: (st) => mono(st.name) },
              { title: 'State', cell: (st) => badge(st.state) },
              {
                title: 'Compensation attempts',
                class: 'num',
                cell: (st) =>
                  st.compensationAttempts > 0
                    ? h('span', { class: 'danger-text' }, String(st.compensationAttempts))
                    : '0',
              },
              { title: 'Action key', cell: (st) => mono(st.actionKey, 'key') },
              {
                title: 'Compensation key',
                cell: (st) => (st.compensationKey ? mono(st.compensationKey, 'key') : muted('none')),
              },
              { title: 'Result', cell: (st) => details('show', preview(st.result)) },
            ],
            s.steps,
            { empty: 'No step started.', emptyKind: 'neutral' },
          ),
          details('Input', preview(s.input, 'input')),
        ),
      ),
    );
  }

  async function renderSagas(params) {
    const data = await api('sagas', params);
    const statuses = ['running', 'compensating', 'completed', 'compensated', 'stuck'];
    return [
      section(
        'Sagas',
        'Steps with compensations persisted before they run.',
        filterForm(
          [tenantFilter, { name: 'saga', label: 'Saga', placeholder: 'exact saga name' }],
          params,
          'sagas',
        ),
        stateStats(statuses, data.counts, 'stuck'),
      ),
      section(
        countedTitle('sagas-stuck', 'Stuck sagas', data.stuck.length, 'stuck'),
        'A compensation kept failing: an operator must fix the cause and retry the saga.',
        sagaCards(data.stuck, 'stuck', 'No stuck sagas.'),
      ),
      section(
        'Stalled',
        'Running or compensating with a lapsed lease: the process died. Recovery resumes them from their durable cursor.',
        sagaCards(data.stalled, 'warn', 'No stalled sagas.'),
      ),
    ];
  }

  // ---------------------------------------------------------------- live counters

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
  function connectLive() {
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

  /** With cells, a selector: switching reads another database (counters, views, actions). */
  async function loadCells() {
    const { cells } = await api('cells').catch(() => ({ cells: [] }));
    if (cells.length === 0) return;
    if (!cells.includes(cell)) cell = cells[0];
    cellSelect.replaceChildren(...cells.map((name) => h('option', { value: name }, name)));
    cellSelect.value = cell;
    cellPicker.hidden = false;
    cellSelect.addEventListener('change', () => {
      cell = cellSelect.value;
      const address = new URL(location.href);
      address.searchParams.set('cell', cell);
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
})();
