/**
 * A small evaluator for the JMESPath expressions Powertools users write in `eventKeyJmesPath` and
 * `payloadValidationJmesPath`, so that they carry over to `key` and `payload` unchanged.
 *
 * Why not a JMESPath library: idem takes no new runtime dependency for this, and what these
 * options hold in practice is a small subset. Powertools' documentation and examples use
 * `transactionId`, `requestContext.identity.user`, `headers."idempotency-key"` (and the unquoted
 * `headers.idempotency-key` its README writes), `body`, `powertools_json(body).id` and
 * `powertools_json(body).["user", "productId"]`. That subset is read here:
 *
 * - `@` (the event itself); a chain of members `a.b.c`, each a bare name (letters, digits, `_`
 *   and, beyond JMESPath, `-`, so `headers.idempotency-key` means the header) or a quoted name
 *   (`"x-key"`, JSON escapes); an index `[0]` or `[-1]`;
 * - multiselect lists `[a, b.c]` and hashes `{user: user.id, product: productId}`, at the start
 *   or after a dot (`.["user", "productId"]`; a quoted name in a list selects that member);
 * - the functions `powertools_json(expr)` (parses a JSON string), `powertools_base64(expr)` (decodes
 *   base64 to text) and `powertools_base64_gzip(expr)` (decodes base64, gunzips to text), followed
 *   by a chain.
 *
 * A missing member or index is `null`, as in JMESPath. Anything else (projections `[*]`, filters,
 * pipes, literals, other functions) is refused when the option is read, with the expression in
 * the message: give a function instead (`key: (event) => …`).
 */
import { gunzipSync } from 'node:zlib';
import { InvalidArgumentError } from '../index.js';
import { BodyMalformedError } from '../http/index.js';

/** A compiled path: the value it selects from `root` (`null` where it finds nothing). */
export type PathEvaluator = (root: unknown) => unknown;

type Node =
  | { kind: 'current' }
  | { kind: 'member'; name: string }
  | { kind: 'index'; index: number }
  | { kind: 'chain'; from: Node; then: Node }
  | { kind: 'list'; items: Node[] }
  | { kind: 'hash'; entries: [string, Node][] }
  | { kind: 'call'; name: FunctionName; argument: Node };

const functions = {
  powertools_json: (value: unknown, source: string): unknown => {
    if (typeof value !== 'string') return null;
    try {
      return JSON.parse(value) as unknown;
    } catch (error) {
      throw new BodyMalformedError(`${source} is not valid JSON: ${(error as Error).message}`, error);
    }
  },
  powertools_base64: (value: unknown): unknown =>
    typeof value === 'string' ? Buffer.from(value, 'base64').toString('utf8') : null,
  powertools_base64_gzip: (value: unknown, source: string): unknown => {
    if (typeof value !== 'string') return null;
    try {
      return gunzipSync(Buffer.from(value, 'base64')).toString('utf8');
    } catch (error) {
      throw new BodyMalformedError(`${source} is not base64 gzip: ${(error as Error).message}`, error);
    }
  },
};
type FunctionName = keyof typeof functions;

/**
 * Compiles `expression` once (when the options are read); throws `InvalidArgumentError` for
 * syntax outside the subset above. `what` names the option in messages (`key`, `payload`).
 */
export function compilePath(expression: string, what: string): PathEvaluator {
  if (typeof expression !== 'string' || expression.trim() === '') {
    throw new InvalidArgumentError(`${what} must be a non-empty path such as 'body' or 'headers."x-key"'`);
  }
  const node = new Parser(expression, what).parseAll();
  return (root) => evaluate(node, root, expression);
}

function evaluate(node: Node, value: unknown, expression: string): unknown {
  switch (node.kind) {
    case 'current':
      return value ?? null;
    case 'member':
      return isRecord(value) ? (value[node.name] ?? null) : null;
    case 'index': {
      if (!Array.isArray(value)) return null;
      const index = node.index < 0 ? value.length + node.index : node.index;
      return (value[index] as unknown) ?? null;
    }
    case 'chain': {
      const from = evaluate(node.from, value, expression);
      // JMESPath: a sub-expression of null is null (a multiselect of null included).
      return from === null ? null : evaluate(node.then, from, expression);
    }
    case 'list':
      return node.items.map((item) => evaluate(item, value, expression));
    case 'hash':
      return Object.fromEntries(
        node.entries.map(([name, item]) => [name, evaluate(item, value, expression)]),
      );
    case 'call':
      return functions[node.name](evaluate(node.argument, value, expression), `\`${expression}\``);
  }
}

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

const bareStart = /[A-Za-z_]/;
const bareChar = /[A-Za-z0-9_-]/;

class Parser {
  private i = 0;

  constructor(
    private readonly text: string,
    private readonly what: string,
  ) {}

  parseAll(): Node {
    const node = this.expression();
    this.space();
    if (this.i < this.text.length) this.fail(`unexpected "${this.text[this.i]}"`);
    return node;
  }

  /** A primary (member, `@`, function call, multiselect) followed by `.member`, `.[…]`, `[n]`. */
  private expression(): Node {
    let node = this.primary();
    for (;;) {
      this.space();
      const c = this.text[this.i];
      if (c === '.') {
        this.i++;
        this.space();
        node = { kind: 'chain', from: node, then: this.afterDot() };
      } else if (c === '[' && this.isIndex()) {
        node = { kind: 'chain', from: node, then: this.index() };
      } else {
        return node;
      }
    }
  }

  private primary(): Node {
    this.space();
    const c = this.text[this.i];
    if (c === '@') {
      this.i++;
      return { kind: 'current' };
    }
    if (c === '[') return this.isIndex() ? this.index() : this.list();
    if (c === '{') return this.hash();
    if (c === '"') return { kind: 'member', name: this.quoted() };
    if (c !== undefined && bareStart.test(c)) {
      const name = this.bare();
      this.space();
      if (this.text[this.i] !== '(') return { kind: 'member', name };
      if (!(name in functions)) {
        this.fail(
          `the function ${name}() is not supported (powertools_json, powertools_base64, powertools_base64_gzip are)`,
        );
      }
      this.i++;
      const argument = this.expression();
      this.expect(')');
      return { kind: 'call', name: name as FunctionName, argument };
    }
    return this.fail(c === undefined ? 'the expression ends too early' : `unexpected "${c}"`);
  }

  /** After a dot: a member, or a multiselect list or hash applied to what came before. */
  private afterDot(): Node {
    const c = this.text[this.i];
    if (c === '[') return this.list();
    if (c === '{') return this.hash();
    if (c === '"') return { kind: 'member', name: this.quoted() };
    if (c !== undefined && bareStart.test(c)) return { kind: 'member', name: this.bare() };
    return this.fail(c === undefined ? 'the expression ends after "."' : `unexpected "${c}" after "."`);
  }

  private isIndex(): boolean {
    return /^\[\s*-?\d+\s*\]/.test(this.text.slice(this.i));
  }

  private index(): Node {
    const match = /^\[\s*(-?\d+)\s*\]/.exec(this.text.slice(this.i))!;
    this.i += match[0].length;
    return { kind: 'index', index: Number(match[1]) };
  }

  private list(): Node {
    this.expect('[');
    this.space();
    if (this.text[this.i] === '*' || this.text[this.i] === '?' || this.text[this.i] === ']') {
      this.fail('projections and filters ([*], [?…], []) are not supported');
    }
    const items: Node[] = [];
    do items.push(this.expression());
    while (this.comma());
    this.expect(']');
    return { kind: 'list', items };
  }

  private hash(): Node {
    this.expect('{');
    const entries: [string, Node][] = [];
    do {
      this.space();
      const name = this.text[this.i] === '"' ? this.quoted() : this.bare();
      this.expect(':');
      entries.push([name, this.expression()]);
    } while (this.comma());
    this.expect('}');
    return { kind: 'hash', entries };
  }

  private comma(): boolean {
    this.space();
    if (this.text[this.i] !== ',') return false;
    this.i++;
    return true;
  }

  private bare(): string {
    const start = this.i;
    if (!bareStart.test(this.text[this.i] ?? '')) this.fail('a name was expected');
    while (this.i < this.text.length && bareChar.test(this.text[this.i]!)) this.i++;
    return this.text.slice(start, this.i);
  }

  /** A JSON string: the quoted identifier of JMESPath. */
  private quoted(): string {
    const match = /^"(?:[^"\\]|\\.)*"/.exec(this.text.slice(this.i));
    if (!match) return this.fail('a quoted name is not terminated');
    this.i += match[0].length;
    try {
      return JSON.parse(match[0]) as string;
    } catch {
      return this.fail(`the quoted name ${match[0]} has an invalid escape`);
    }
  }

  private expect(c: string): void {
    this.space();
    if (this.text[this.i] !== c) this.fail(`"${c}" was expected`);
    this.i++;
  }

  private space(): void {
    while (this.text[this.i] === ' ' || this.text[this.i] === '\t') this.i++;
  }

  private fail(reason: string): never {
    throw new InvalidArgumentError(
      `${this.what}: cannot read the path \`${this.text}\` at position ${this.i}: ${reason}. ` +
        'idem reads members, quoted names, indexes, multiselect lists and hashes and powertools_json(); ' +
        `give a function for anything else (${this.what}: (event) => …)`,
    );
  }
}
