/** A different payload for the key-reuse drill, derived from the body when none is given. */

export interface AlteredPayload {
  body: Buffer;
  /** What changed, for the report: `amount: 100 → 101`. */
  change: string;
}

/**
 * Adds 1 to the body's first number (depth first, in key order), or else appends `-changed` to its
 * first string, or else adds a field to a top-level object. A number comes first because it is the
 * change least likely to break validation (a currency code would not survive a suffix). Returns
 * undefined when the body is empty or not JSON: then `--alt-body` is needed.
 */
export function alterPayload(body: Buffer | null): AlteredPayload | undefined {
  if (!body || body.length === 0) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(body.toString('utf8'));
  } catch {
    return undefined;
  }
  for (const kind of ['number', 'string'] as const) {
    const found = findFirst(value, kind, []);
    if (found) {
      const before = get(value, found);
      const after = kind === 'number' ? (before as number) + 1 : `${before as string}-changed`;
      const altered = set(value, found, after);
      return {
        body: Buffer.from(JSON.stringify(altered)),
        change: `${found.join('.') || '(body)'}: ${JSON.stringify(before)} → ${JSON.stringify(after)}`,
      };
    }
  }
  if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
    return {
      body: Buffer.from(JSON.stringify({ ...value, idem_drill_variant: 1 })),
      change: 'added idem_drill_variant: 1',
    };
  }
  return undefined;
}

type Path = (string | number)[];

function findFirst(value: unknown, kind: 'number' | 'string', path: Path): Path | undefined {
  if (typeof value === kind) return path;
  if (value === null || typeof value !== 'object') return undefined;
  const entries: [string | number, unknown][] = Array.isArray(value)
    ? value.map((v, i) => [i, v])
    : Object.entries(value);
  for (const [k, v] of entries) {
    const found = findFirst(v, kind, [...path, k]);
    if (found) return found;
  }
  return undefined;
}

function get(value: unknown, path: Path): unknown {
  return path.reduce<unknown>((node, k) => (node as Record<string | number, unknown>)[k], value);
}

function set(value: unknown, path: Path, replacement: unknown): unknown {
  if (path.length === 0) return replacement;
  const [head, ...rest] = path as [string | number, ...Path];
  if (Array.isArray(value)) {
    return (value as unknown[]).map((v, i) => (i === head ? set(v, rest, replacement) : v));
  }
  const record = value as Record<string, unknown>;
  return { ...record, [head]: set(record[head], rest, replacement) };
}
