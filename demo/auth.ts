/**
 * The demo's API keys: `Authorization: Bearer sk_test_<tenant>`, tenant `[a-z0-9_]{1,32}`.
 *
 * Read from the raw header lines, not from Node's parsed `headers`: Node keeps only the first of
 * two `Authorization` lines, while a proxy in front may keep the last, so a request carrying tenant
 * A's key and then tenant B's would be A here and B there. Two lines (an empty one included) are
 * refused outright.
 */
const bearer = /^Bearer sk_test_([a-z0-9_]{1,32})$/;

export type Authorization =
  | { kind: 'tenant'; tenant: string }
  /** No Authorization line, or one that is not a demo API key: 401. */
  | { kind: 'missing' }
  /** More than one Authorization line: 400, whatever they hold. */
  | { kind: 'repeated'; count: number };

/** Who a request is, from Node's `rawHeaders` (name, value, name, value, …). */
export function authorize(rawHeaders: readonly string[]): Authorization {
  const values: string[] = [];
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    if (rawHeaders[i]!.toLowerCase() === 'authorization') values.push(rawHeaders[i + 1]!);
  }
  if (values.length > 1) return { kind: 'repeated', count: values.length };
  const tenant = tenantFromAuthorization(values[0]);
  return tenant === undefined ? { kind: 'missing' } : { kind: 'tenant', tenant };
}

/** The tenant of one `Authorization` value, or undefined when it is not a demo API key. */
export function tenantFromAuthorization(header: string | string[] | undefined): string | undefined {
  if (typeof header !== 'string') return undefined;
  return bearer.exec(header)?.[1];
}
