/* The console's JSON API, on the cell (database) the page reads. */
/* global document, location, fetch, URLSearchParams */
import { queryString } from './dom.js';

/** Where the console is mounted (`basePath`), as the page template gives it. */
export const base = document.querySelector('meta[name="idem-console-base"]').getAttribute('content');

// The cell (database) every API call reads, kept in the page's address as ?cell=. '' without cells.
let cell = new URLSearchParams(location.search).get('cell') || '';

export function currentCell() {
  return cell;
}

export function selectCell(name) {
  cell = name;
}

/** `?cell=…` for the selected cell, or '' without one. */
export function cellQuery() {
  return cell ? `?cell=${encodeURIComponent(cell)}` : '';
}

/** GETs `api/<path>` with `params` (empty ones left out): the JSON answer, or throws its detail. */
export async function api(path, params) {
  const text = queryString(cell ? { ...params, cell } : params);
  const response = await fetch(`${base}/api/${path}${text ? `?${text}` : ''}`, {
    headers: { accept: 'application/json' },
    credentials: 'same-origin',
  });
  return answer(response);
}

/** A view that reads `api/<path>` with the route's parameters: `render(data, params)`. */
export function apiView(path, render) {
  return async (params) => render(await api(path, params), params);
}

/** POSTs `body` as JSON, with the header the console's mutation check asks for. */
export async function post(path, body) {
  const response = await fetch(`${base}/api/${path}${cellQuery()}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-idem-console': '1', accept: 'application/json' },
    credentials: 'same-origin',
    body: JSON.stringify(body),
  });
  return answer(response);
}

async function answer(response) {
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    const detail = body && body.detail ? body.detail : `HTTP ${response.status}`;
    throw new Error(detail);
  }
  return body;
}
