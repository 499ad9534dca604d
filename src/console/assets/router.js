/* Hash routes (`#/outbox?topic=payments`) to views: one render at a time, the latest wins. */
/* global document, location, URLSearchParams */
import { h } from './dom.js';

const view = document.getElementById('view');
/** The route of the bare page, and of an unknown route. */
const home = 'requests';
let views = {};
let tabOf = {};
let renderToken = 0;

function parseRoute() {
  const hash = location.hash.replace(/^#\/?/, '');
  const [path, query] = hash.split('?');
  return { name: path || home, params: Object.fromEntries(new URLSearchParams(query || '')) };
}

/**
 * Sets the views by route name (each `async (params) => node | node[]`) and the tab of each route
 * that is not a tab of its own.
 */
export function defineRoutes(routes, tabs) {
  views = routes;
  tabOf = tabs;
}

/** Renders the route in the address bar. */
export async function route() {
  const { name, params } = parseRoute();
  const render = views[name] || views[home];
  const tab = tabOf[name] || (views[name] ? name : home);
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

/** Renders the current view again (after an action changed what it shows). */
export function reload() {
  return route();
}
