/**
 * Who may use the console. The rule follows the bind address, never the caller's address: a
 * console bound beyond loopback is reachable from elsewhere (and a local reverse proxy makes remote
 * callers look local), so every route then needs the token. On loopback without a token, the Host
 * header must name loopback too, so a web page that rebinds its own DNS name to 127.0.0.1 cannot
 * read the console through the operator's browser.
 */
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import { isIP } from 'node:net';
import { InvalidArgumentError } from '../core/errors.js';
import { consoleDefaults } from './options.js';

/** True for 127.0.0.0/8, ::1, IPv4-mapped loopback and the name `localhost`. */
export function isLoopback(host: string): boolean {
  const h = host
    .trim()
    .toLowerCase()
    .replace(/^\[(.*)\]$/, '$1');
  if (h === 'localhost' || h.endsWith('.localhost')) return true;
  if (h === '::1' || h === '0:0:0:0:0:0:0:1') return true;
  const v4 = h.startsWith('::ffff:') ? h.slice(7) : h;
  return isIP(v4) === 4 && v4.startsWith('127.');
}

/** The host part of a Host header (`name`, `name:port`, `[v6]:port`), lower-case. */
export function hostName(header: string | undefined): string | null {
  if (!header) return null;
  const value = header.trim().toLowerCase();
  if (value.startsWith('[')) {
    const end = value.indexOf(']');
    return end > 0 ? value.slice(0, end + 1) : null;
  }
  const colon = value.indexOf(':');
  return colon === -1 ? value : value.slice(0, colon);
}

/** Refuses a configuration that would expose the console without a token. */
export function checkExposure(host: string, token: string | undefined): void {
  if (token !== undefined && token.length < consoleDefaults.minTokenLength) {
    throw new InvalidArgumentError(
      `the console token must be at least ${consoleDefaults.minTokenLength} characters`,
    );
  }
  if (!isLoopback(host) && token === undefined) {
    throw new InvalidArgumentError(
      `the console refuses to serve on ${host} without a token: set CONSOLE_TOKEN, or bind to 127.0.0.1`,
    );
  }
}

/** Compares secrets in constant time (both sides hashed first, so lengths never leak). */
export function sameSecret(given: string, expected: string): boolean {
  const a = createHash('sha256').update(given).digest();
  const b = createHash('sha256').update(expected).digest();
  return timingSafeEqual(a, b);
}

export const sessionCookie = 'idem_console';

/** The cookie's value: derived from the token, so the token itself is never stored by the browser. */
export function sessionValue(token: string): string {
  return createHmac('sha256', token).update('idem-console-session-v1').digest('base64url');
}

/** Reads one cookie from a Cookie header. */
export function readCookie(header: string | undefined, name: string): string | undefined {
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq === -1) continue;
    if (part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

/** The bearer token of an Authorization header, if any. */
export function bearer(header: string | undefined): string | undefined {
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header ?? '');
  return match?.[1];
}

/** What a request's credentials and origin amount to. */
export type AccessDecision =
  { allow: true; setCookie: boolean } | { allow: false; status: 401 | 403; reason: string };

export interface AccessInput {
  /** The address the server listens on. */
  boundTo: string;
  token: string | undefined;
  hostHeader: string | undefined;
  authorization: string | undefined;
  cookie: string | undefined;
  queryToken: string | undefined;
}

export function decideAccess(input: AccessInput): AccessDecision {
  const exposed = !isLoopback(input.boundTo);
  if (exposed && input.token === undefined) {
    return { allow: false, status: 403, reason: 'the console is bound beyond loopback and has no token' };
  }
  if (!exposed) {
    const name = hostName(input.hostHeader);
    if (name === null || !isLoopback(name)) {
      return { allow: false, status: 403, reason: 'the Host header must name loopback' };
    }
  }
  if (input.token === undefined) return { allow: true, setCookie: false };
  const presented = bearer(input.authorization);
  if (presented !== undefined && sameSecret(presented, input.token)) return { allow: true, setCookie: false };
  const cookie = readCookie(input.cookie, sessionCookie);
  if (cookie !== undefined && sameSecret(cookie, sessionValue(input.token))) {
    return { allow: true, setCookie: false };
  }
  if (input.queryToken !== undefined && sameSecret(input.queryToken, input.token)) {
    return { allow: true, setCookie: true };
  }
  return { allow: false, status: 401, reason: 'a console token is required' };
}

/** The headers that say where a request comes from (Fetch Metadata and Origin). */
export interface SiteHeaders {
  origin?: string | undefined;
  host?: string | undefined;
  'sec-fetch-site'?: string | undefined;
  'sec-fetch-mode'?: string | undefined;
  'sec-fetch-dest'?: string | undefined;
}

/**
 * Every request, reads and the live stream included, must come from the console's own pages (or
 * from no page at all: curl, an address typed in): `Sec-Fetch-Site` `same-origin` or `none`, and
 * an `Origin`, when sent, naming the console's own host. A page on another site, or on another
 * port of the same machine (`same-site`), can neither read the API nor hold live streams open
 * through the operator's browser. One exception: a top-level navigation to the page itself (a
 * link in an alert or a runbook) opens it; the page holds no data, and everything it then loads is
 * same-origin. Browsers that send neither header (old ones, non-browsers) are not refused: the
 * loopback Host check and the token still apply.
 */
export function checkSite(headers: SiteHeaders, options: { page: boolean; method: string }): string | null {
  const site = headers['sec-fetch-site'];
  if (site !== undefined && site !== 'same-origin' && site !== 'none') {
    const navigation =
      options.page &&
      (options.method === 'GET' || options.method === 'HEAD') &&
      headers['sec-fetch-mode'] === 'navigate' &&
      headers['sec-fetch-dest'] === 'document';
    if (!navigation) return `cross-site request refused (Sec-Fetch-Site: ${site})`;
  }
  if (headers.origin !== undefined) {
    let originHost: string;
    try {
      originHost = new URL(headers.origin).host;
    } catch {
      return 'cross-origin request refused (Origin is not an origin)';
    }
    if (originHost === '' || originHost.toLowerCase() !== (headers.host ?? '').toLowerCase())
      return 'cross-origin request refused (Origin names another host)';
  }
  return null;
}

/**
 * Mutations need a custom header (a cross-site form or fetch cannot send one without a CORS
 * preflight, which the console never answers), a JSON body and, like every request, the same
 * origin (`checkSite`).
 */
export function checkMutation(
  headers: SiteHeaders & { 'x-idem-console'?: string | undefined; 'content-type'?: string | undefined },
): string | null {
  if (headers['x-idem-console'] !== '1') return 'the X-Idem-Console: 1 header is required';
  if (!/^application\/json\b/i.test(headers['content-type'] ?? ''))
    return 'the body must be application/json';
  return checkSite(headers, { page: false, method: 'POST' });
}
