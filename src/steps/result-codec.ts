/**
 * How a step's result is stored, so that a resume returns what the first run returned, with the
 * same types. Two columns per result:
 * - the result column holds the plain-JSON part: exactly `JSON.stringify(value)` for plain JSON
 *   values, and for the rest what `JSON.stringify` would show (ISO strings for dates, decimal
 *   strings for bigints, base64 for bytes, entry arrays for maps): what operators read in the
 *   console stays plain JSON;
 * - a nullable `*_meta` column (migration 0009) holds superjson's type annotations for the values
 *   that plain JSON cannot carry. NULL for plain JSON values, and for every row written before
 *   0009: those parse with `JSON.parse`, exactly as before.
 *
 * Why superjson (2.2.7, blitz-js/superjson), compared with devalue 6.0.3 and seroval 1.8.2 (npm):
 * - it is the only one of the three that splits a value into a plain-JSON part and separate
 *   annotations (`{ json, meta }`, meta undefined for plain JSON), which is this storage shape;
 *   devalue stores an indexed table (`{a:1}` → `[{"a":1},1]`, a Date as `[["Date","…"]]`) and
 *   seroval a tagged tree (`{"t":{"t":10,…}}`): neither stays readable, nor plain JSON for plain
 *   values;
 * - all three carry Date, BigInt, Map, Set, undefined, NaN/±Infinity/-0, RegExp, URL, cycles and
 *   typed arrays; superjson fails on a Node `Buffer` (stored, then "Trying to deserialize unknown
 *   typed array" on the way back) and devalue and seroval give a `Uint8Array` back for one, so
 *   bytes go through custom transformers below (base64 in the JSON part); none keeps every `Error`
 *   whole (superjson gives back an `Error` with the name, message and cause, not the class or the
 *   stack; devalue refuses it; seroval keeps built-in error classes and the stack), so errors are
 *   refused below;
 * - what it cannot represent it stores silently as something else (a class instance as its own
 *   fields, a function or symbol dropped, a sparse array's holes as null, an invalid Date as null),
 *   where devalue throws: `inspect` below refuses those first, with the path, so nothing is stored
 *   that would resume as a different value;
 * - speed is not a concern at a step's scale: a step is at least one committed transaction (0.7 to
 *   3 ms per step measured here, on a loaded 2-core machine), and an encode + decode of a
 *   `{ id, amount, createdAt: Date }` result costs microseconds (1e5 iterations, median of 5
 *   rounds, Node 20.20): JSON.stringify + parse 1.8 µs (and the Date comes back a string),
 *   superjson 7.3–8.4 µs, devalue 4.9–5.2 µs, seroval 4.6–4.8 µs, this module 7.7–8.0 µs (the
 *   encode alone, what a first run pays: 4.1–5.7 µs against JSON.stringify's 1.3 µs). For a plain
 *   JSON result this module skips superjson: 1.2 µs against 0.7 µs (encode alone 0.66 against 0.27),
 *   where superjson would take 3.4, devalue 4.0 and seroval 3.5;
 * - module format: superjson (and its one dependency, copy-anything 4) and devalue ship ESM only
 *   (`"type": "module"`, no `require` condition); seroval ships ESM and CommonJS. `require()` of
 *   superjson and devalue works on Node 20.19+ (tried on 20.20: require(esm) is on by default since
 *   20.19 and 22.12; it fails with ERR_REQUIRE_ESM under `--no-experimental-require-module` and on
 *   older Node), and Jest's own module loader does not do require(esm). So idem's CommonJS build
 *   bundles superjson as CommonJS (dist/cjs/vendor/superjson.js, scripts/build.ts), as it does
 *   idem's other ESM-only dependencies (uuid 14, canonicalize 4); the ESM build imports it.
 *
 * A private SuperJSON instance: the registrations below never leak into an application's own use
 * of superjson, and theirs never change what idem stores.
 */
import { Buffer } from 'node:buffer';
import { SuperJSON } from 'superjson';
import { InvalidArgumentError } from '../core/errors.js';

/** A result as stored: the plain-JSON text and the type annotations (null for plain JSON). */
export interface EncodedResult {
  json: string;
  meta: string | null;
}

const codec = new SuperJSON();
// Custom transformers are tried before superjson's own typed-array rule, which would store bytes
// as an array of numbers (about 4 characters a byte) and cannot restore a Buffer.
codec.registerCustom<Buffer, string>(
  {
    isApplicable: (v): v is Buffer => Buffer.isBuffer(v),
    serialize: (v) => v.toString('base64'),
    deserialize: (v) => Buffer.from(v, 'base64'),
  },
  'Buffer',
);
codec.registerCustom<Uint8Array, string>(
  {
    isApplicable: (v): v is Uint8Array =>
      v instanceof Uint8Array && Object.getPrototypeOf(v) === Uint8Array.prototype,
    serialize: (v) => Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('base64'),
    deserialize: (v) => new Uint8Array(Buffer.from(v, 'base64')),
  },
  'bytes',
);

/** The typed arrays superjson restores as themselves (its typed-array rule), besides bytes above. */
const typedArrays = new Set<object>(
  [
    Int8Array,
    Int16Array,
    Uint16Array,
    Int32Array,
    Uint32Array,
    Float32Array,
    Float64Array,
    Uint8ClampedArray,
    BigInt64Array,
    BigUint64Array,
  ].map((c) => c.prototype),
);

/** What a result may hold, for the error message. */
const supported =
  'plain data: JSON values, undefined, bigint, Date, Map, Set, Uint8Array, Buffer, RegExp, URL ' +
  '(docs/guide/sagas.md, "Step results across a resume")';

/**
 * Encodes `value` for storage. Throws `InvalidArgumentError` naming `what` (e.g. `step "charge"`)
 * and the path when the value holds something that would not come back as itself: a function, a
 * symbol, a class instance, an Error, a sparse array, an invalid Date, a symbol-keyed property.
 * Called before the step's record is written: the step's transaction rolls back, nothing is stored.
 */
export function encodeResult(value: unknown, what: string): EncodedResult {
  let typed: boolean;
  try {
    typed = inspect(value, 'result', []);
  } catch (error) {
    if (error instanceof Refusal) {
      throw new InvalidArgumentError(
        `${what} returned ${error.found} at ${error.path}, which cannot be stored so that a resume returns ` +
          `the same value; return ${supported}`,
      );
    }
    throw error;
  }
  // Plain JSON (the usual case): no superjson, no annotations, the same text as before 0009.
  if (!typed) return { json: JSON.stringify(value), meta: null };
  let encoded: ReturnType<SuperJSON['serialize']>;
  try {
    encoded = codec.serialize(value as Parameters<SuperJSON['serialize']>[0]);
  } catch (error) {
    // superjson refuses object keys named __proto__, constructor or prototype in a typed value.
    throw new InvalidArgumentError(
      `${what} returned a value that cannot be stored: ${(error as Error).message} (superjson refuses a key ` +
        `named __proto__, constructor or prototype in a result that holds more than plain JSON)`,
    );
  }
  return {
    json: JSON.stringify(encoded.json) ?? 'null',
    meta: encoded.meta === undefined ? null : JSON.stringify(encoded.meta),
  };
}

/**
 * Decodes a stored result. `meta` null (plain JSON, or a row written before migration 0009):
 * `JSON.parse`, as before. A value a driver already parsed passes through.
 */
export function decodeResult(json: unknown, meta: unknown): unknown {
  if (typeof json !== 'string') return json ?? null;
  if (meta === null || meta === undefined) return JSON.parse(json) as unknown;
  return codec.deserialize({
    json: JSON.parse(json) as never,
    meta: (typeof meta === 'string' ? JSON.parse(meta) : meta) as never,
  });
}

class Refusal {
  constructor(
    readonly found: string,
    readonly path: string,
  ) {}
}

/**
 * Walks `value`: true when it holds something plain JSON cannot carry (so superjson encodes it),
 * false for plain JSON; throws `Refusal` for what neither would give back as itself. `ancestors`
 * are the containers above `value`: one seen again is a cycle (superjson keeps it).
 */
function inspect(value: unknown, path: string, ancestors: object[]): boolean {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return false;
    case 'number':
      return !Number.isFinite(value) || Object.is(value, -0);
    case 'bigint':
    case 'undefined':
      return true;
    case 'function':
      throw new Refusal(`a function${value.name ? ` (${value.name})` : ''}`, path);
    case 'symbol':
      throw new Refusal(`a symbol (${String(value)})`, path);
    default:
      break;
  }
  if (value === null) return false;
  const object = value as object;
  if (ancestors.includes(object)) return true;
  const proto: unknown = Object.getPrototypeOf(object);
  if (proto === Object.prototype || proto === null) {
    if (Object.getOwnPropertySymbols(object).length > 0) throw new Refusal('a symbol-keyed property', path);
    return inspectChildren(object, Object.entries(object), ancestors, (k) => propertyPath(path, k));
  }
  if (proto === Array.prototype) {
    const array = object as unknown[];
    for (let i = 0; i < array.length; i++) {
      if (!(i in array)) throw new Refusal('a sparse array (a hole)', `${path}[${i}]`);
    }
    return inspectChildren(object, array.entries(), ancestors, (i) => `${path}[${i}]`);
  }
  if (proto === Date.prototype) {
    if (Number.isNaN((object as Date).getTime())) throw new Refusal('an invalid Date', path);
    return true;
  }
  if (proto === Map.prototype) {
    const map = object as Map<unknown, unknown>;
    let i = 0;
    ancestors.push(object);
    for (const [k, v] of map) {
      inspect(k, `${path}.keys()[${i}]`, ancestors);
      inspect(v, `${path}.get(${typeof k === 'string' ? JSON.stringify(k) : `keys()[${i}]`})`, ancestors);
      i++;
    }
    ancestors.pop();
    return true;
  }
  if (proto === Set.prototype) {
    let i = 0;
    ancestors.push(object);
    for (const v of object as Set<unknown>) inspect(v, `${path}.values()[${i++}]`, ancestors);
    ancestors.pop();
    return true;
  }
  if (proto === RegExp.prototype || proto === URL.prototype || proto === Uint8Array.prototype) return true;
  if (Buffer.isBuffer(object) || typedArrays.has(proto as object)) return true;
  if (object instanceof Error) {
    throw new Refusal(
      `an Error (${object.name}; its class and stack would not survive: return its fields)`,
      path,
    );
  }
  const name = (object as { constructor?: { name?: unknown } }).constructor?.name;
  throw new Refusal(
    `an instance of ${typeof name === 'string' && name ? name : 'a class'} (its class and methods would not survive)`,
    path,
  );
}

function inspectChildren<K>(
  container: object,
  entries: Iterable<[K, unknown]>,
  ancestors: object[],
  childPath: (key: K) => string,
): boolean {
  let typed = false;
  ancestors.push(container);
  for (const [k, v] of entries) if (inspect(v, childPath(k), ancestors)) typed = true;
  ancestors.pop();
  return typed;
}

function propertyPath(path: string, key: string): string {
  return /^[A-Za-z_$][\w$]*$/.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`;
}
