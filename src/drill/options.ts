import { InvalidArgumentError } from '../core/errors.js';
import { drillNames, type DrillName } from './drill-names.js';
import { headerList, type HeaderList } from './headers.js';

/** What `runDrills` is given. Only `url` is required. */
export interface DrillOptions {
  /** The endpoint under test, e.g. `http://127.0.0.1:3000/v1/payments`. */
  url: string;
  /** HTTP method of the keyed request. Default `POST`. */
  method?: string;
  /**
   * Request body sent by every drill, as given (bytes or text). Default none. When set and no
   * `Content-Type` header is given, `application/json` is sent.
   */
  body?: Uint8Array | string | null;
  /**
   * A different, valid payload for the key-reuse drill. Default: derived from `body` by adding 1 to
   * its first number (or changing its first string). Give one when the body is not JSON, or when
   * the derived change would be refused for another reason (validation).
   */
  altBody?: Uint8Array | string | null;
  /** Headers sent on every request (credentials, content type). Default none. */
  headers?: HeaderList | Record<string, string>;
  /**
   * A header of another tenant, e.g. `['Authorization', 'Bearer sk_test_b']`, replacing the header
   * of the same name for the cross-tenant drill. Default none: that drill is skipped.
   */
  secondCredential?: readonly [string, string];
  /** Identical requests sent at once by the concurrency drill. Default 20 (2–1000). */
  concurrency?: number;
  /** Name of the key header. Default `Idempotency-Key`. */
  keyHeader?: string;
  /**
   * Name of the header that marks a replayed answer. Default `Idempotent-Replayed` (Stripe's and
   * idem's). `true`, `?1` and `1` mean replayed; `false`, `?0` and `0` mean executed.
   */
  replayHeader?: string;
  /** The server refuses requests without a valid key: run the missing/malformed-key drill. Default false. */
  requireKey?: boolean;
  /**
   * How long one request may take, in ms, and how long a drill keeps retrying answers that say
   * "in progress" (409, 425, 429). Default 10000.
   */
  timeoutMs?: number;
  /**
   * A URL (absolute, or relative to `url`) answering with the number of effects, read with GET
   * and the same headers before and after a drill: a bare number, a JSON number or array, or JSON
   * with `count`/`total`/`total_count` or a `data`/`items`/`results` array. Default none: executions
   * are judged from answers alone.
   */
  countUrl?: string;
  /**
   * Dotted path to the count in the count URL's JSON, e.g. `meta.total` or `payments.length`.
   * Default: the shapes listed under `countUrl`.
   */
  countPath?: string;
  /** Run only these drills, in the standard order. Default: all. */
  only?: readonly DrillName[];
}

/** `DrillOptions` with every default applied and every value checked. */
export interface ResolvedDrillOptions {
  url: URL;
  method: string;
  body: Buffer | null;
  altBody: Buffer | null;
  headers: HeaderList;
  secondCredential: readonly [string, string] | null;
  concurrency: number;
  keyHeader: string;
  replayHeader: string;
  requireKey: boolean;
  timeoutMs: number;
  countUrl: URL | null;
  countPath: string | null;
  only: readonly DrillName[];
}

export const drillDefaults = {
  method: 'POST',
  concurrency: 20,
  keyHeader: 'Idempotency-Key',
  replayHeader: 'Idempotent-Replayed',
  timeoutMs: 10_000,
} as const;

const tokenName = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/** Applies defaults and validates; throws `InvalidArgumentError` with a message meant for a person. */
export function resolveDrillOptions(options: DrillOptions): ResolvedDrillOptions {
  const url = parseHttpUrl('url', options.url);
  const method = (options.method ?? drillDefaults.method).toUpperCase();
  if (!tokenName.test(method)) throw new InvalidArgumentError(`method '${method}' is not an HTTP method`);
  const concurrency = options.concurrency ?? drillDefaults.concurrency;
  if (!Number.isInteger(concurrency) || concurrency < 2 || concurrency > 1000) {
    throw new InvalidArgumentError('concurrency must be an integer from 2 to 1000');
  }
  const timeoutMs = options.timeoutMs ?? drillDefaults.timeoutMs;
  if (!Number.isFinite(timeoutMs) || timeoutMs < 100) {
    throw new InvalidArgumentError('timeout must be at least 100 ms');
  }
  const keyHeader = headerName('key header', options.keyHeader ?? drillDefaults.keyHeader);
  const replayHeader = headerName('replay header', options.replayHeader ?? drillDefaults.replayHeader);
  const body = toBuffer(options.body);
  let headers = headerList(options.headers ?? []);
  if (body && !headers.some(([name]) => name.toLowerCase() === 'content-type')) {
    headers = [...headers, ['Content-Type', 'application/json']];
  }
  if (headers.some(([name]) => name.toLowerCase() === keyHeader.toLowerCase())) {
    throw new InvalidArgumentError(`do not pass ${keyHeader} in the headers: every drill sends its own keys`);
  }
  let secondCredential: readonly [string, string] | null = null;
  if (options.secondCredential) {
    const [name, value] = options.secondCredential;
    secondCredential = [headerName('second credential', name), value];
  }
  const only = options.only?.length ? options.only : drillNames;
  for (const name of only) {
    if (!drillNames.includes(name)) {
      throw new InvalidArgumentError(`unknown drill '${String(name)}' (drills: ${drillNames.join(', ')})`);
    }
  }
  let countUrl: URL | null = null;
  if (options.countUrl) {
    try {
      countUrl = new URL(options.countUrl, url);
    } catch {
      throw new InvalidArgumentError(`count URL '${options.countUrl}' is not a URL`);
    }
    parseHttpUrl('count URL', countUrl.href);
  }
  return {
    url,
    method,
    body,
    altBody: toBuffer(options.altBody),
    headers,
    secondCredential,
    concurrency,
    keyHeader,
    replayHeader,
    requireKey: options.requireKey ?? false,
    timeoutMs,
    countUrl,
    countPath: options.countPath ?? null,
    only: drillNames.filter((name) => only.includes(name)),
  };
}

function parseHttpUrl(what: string, value: string): URL {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new InvalidArgumentError(`${what} '${value}' is not an absolute URL`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new InvalidArgumentError(`${what} must be http:// or https://, not ${url.protocol}`);
  }
  return url;
}

function headerName(what: string, name: string): string {
  if (!tokenName.test(name)) throw new InvalidArgumentError(`${what} '${name}' is not a header name`);
  return name;
}

function toBuffer(value: Uint8Array | string | null | undefined): Buffer | null {
  if (value === undefined || value === null) return null;
  return typeof value === 'string' ? Buffer.from(value, 'utf8') : Buffer.from(value);
}
