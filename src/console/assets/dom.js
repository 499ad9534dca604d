/* Building the page's elements. Every value from the database is set with textContent (through
 * `h`): stored bodies, keys and errors are attacker-controlled, and nothing here ever parses them
 * as markup. */
/* global document, window, URLSearchParams */

/** Creates an element. Strings and numbers become text nodes; null/false children are skipped. */
export function h(tag, props, ...children) {
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

/** A link to one of the page's routes (`#/route?params`). */
export function link(route, params, ...children) {
  return h('a', { href: routeHref(route, params) }, ...children);
}

/** `params` without their empty values, as a query string: `a=1&b=2`, or ''. */
export function queryString(params) {
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {}))
    if (v !== undefined && v !== null && v !== '') query.set(k, v);
  return query.toString();
}

export function routeHref(route, params) {
  const text = queryString(params);
  return `#/${route}${text ? `?${text}` : ''}`;
}
