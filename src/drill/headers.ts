import { InvalidArgumentError } from '../core/errors.js';

/** Request headers in order, repeats allowed: `[name, value]` pairs. */
export type HeaderList = ReadonlyArray<readonly [string, string]>;

/** Accepts pairs or a plain record. */
export function headerList(headers: HeaderList | Record<string, string>): HeaderList {
  return Array.isArray(headers) ? [...(headers as HeaderList)] : Object.entries(headers);
}

/** Parses `Name: value`, as given to `--header`. */
export function parseHeaderLine(line: string): [string, string] {
  const colon = line.indexOf(':');
  const name = colon > 0 ? line.slice(0, colon).trim() : '';
  if (!name) throw new InvalidArgumentError(`header '${line}' is not 'Name: value'`);
  return [name, line.slice(colon + 1).trim()];
}

/** `headers` with every field named like `name` replaced by one `[name, value]` (or none when null). */
export function withHeader(headers: HeaderList, name: string, value: string | null): HeaderList {
  const lower = name.toLowerCase();
  const kept = headers.filter(([n]) => n.toLowerCase() !== lower);
  return value === null ? kept : [...kept, [name, value]];
}

/** The shape `node:http` takes: repeated names become arrays, so every field is sent. */
export function toNodeHeaders(headers: HeaderList): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of headers) {
    const existing = out[name];
    out[name] =
      existing === undefined ? value : [...(Array.isArray(existing) ? existing : [existing]), value];
  }
  return out;
}
