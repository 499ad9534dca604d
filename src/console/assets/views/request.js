/* One keyed request: its row, why it is stuck or failed, its stored response or result, its steps. */
import { api } from '../api.js';
import { h, link } from '../dom.js';
import { badge, duration, mono, muted, when } from '../format.js';
import { details, facts, headersTable, preview, section, table } from '../widgets.js';
import { stateBadge } from './requests.js';

export async function renderRequest(params) {
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
