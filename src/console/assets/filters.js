/* The filter form above a list: exact matches, written into the route so a filtered view is a link. */
/* global location */
import { h, link, routeHref } from './dom.js';

export const agePresets = [
  ['', 'Any age'],
  ['newerThan=15m', 'Last 15 minutes'],
  ['newerThan=1h', 'Last hour'],
  ['newerThan=24h', 'Last 24 hours'],
  ['olderThan=1h', 'Older than 1 hour'],
  ['olderThan=24h', 'Older than 24 hours'],
  ['olderThan=7d', 'Older than 7 days'],
];

export const tenantFilter = { name: 'tenant', label: 'Tenant', placeholder: 'exact tenant id' };

/**
 * A form of `fields` ({ name, label, placeholder } or, for a select, { name, label, options }),
 * filled from `params`; applying it navigates to `route` with the values given. The `age` field's
 * options are `newerThan=…`/`olderThan=…` pairs.
 */
export function filterForm(fields, params, route) {
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
