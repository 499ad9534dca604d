/**
 * What two adapters need to know about a statement's text, read the way PostgreSQL reads it:
 * string constants, quoted identifiers, comments and dollar-quoted bodies are taken literally, so a
 * `$1`, `?`, `;` or `RETURNING` inside them never counts.
 *
 * - Prisma has one raw call that returns rows and no count (`$queryRawUnsafe`) and one that returns
 *   a count and no rows (`$executeRawUnsafe`): `returnsRows` picks between them.
 * - Knex and MikroORM bind `?` placeholders, not `$1`: `toQuestionMarks` rewrites the text.
 */

import { InvalidArgumentError } from '../core/errors.js';

/** A piece of SQL text: `code` is false for the parts PostgreSQL reads literally. */
interface Piece {
  code: boolean;
  text: string;
}

const identifierChar = /[A-Za-z0-9_$\u0080-\uffff]/;
const dollarTag = /^\$([A-Za-z_\u0080-\uffff][A-Za-z0-9_\u0080-\uffff]*)?\$/;

/** Splits `sql` into code and literal pieces (strings, quoted identifiers, comments, dollar quotes). */
function pieces(sql: string): Piece[] {
  const out: Piece[] = [];
  let codeStart = 0;
  let i = 0;
  const literal = (start: number, end: number) => {
    if (start > codeStart) out.push({ code: true, text: sql.slice(codeStart, start) });
    out.push({ code: false, text: sql.slice(start, end) });
    codeStart = end;
    i = end;
  };
  while (i < sql.length) {
    const c = sql[i]!;
    const next = sql[i + 1];
    const before = i > 0 ? sql[i - 1]! : '';
    if (c === "'") {
      // E'…' strings take backslash escapes; every other string doubles its quotes only.
      const escapes = (before === 'E' || before === 'e') && !identifierChar.test(sql[i - 2] ?? '');
      literal(i, endOfQuoted(sql, i, "'", escapes));
    } else if (c === '"') {
      literal(i, endOfQuoted(sql, i, '"', false));
    } else if (c === '-' && next === '-') {
      const end = sql.indexOf('\n', i);
      literal(i, end === -1 ? sql.length : end);
    } else if (c === '/' && next === '*') {
      literal(i, endOfBlockComment(sql, i));
    } else if (c === '$' && !identifierChar.test(before)) {
      const tag = dollarTag.exec(sql.slice(i));
      if (tag) {
        const close = sql.indexOf(tag[0], i + tag[0].length);
        literal(i, close === -1 ? sql.length : close + tag[0].length);
      } else i++;
    } else i++;
  }
  if (codeStart < sql.length) out.push({ code: true, text: sql.slice(codeStart) });
  return out;
}

function endOfQuoted(sql: string, start: number, quote: string, backslashEscapes: boolean): number {
  for (let i = start + 1; i < sql.length; i++) {
    const c = sql[i];
    if (backslashEscapes && c === '\\') i++;
    else if (c === quote) {
      if (sql[i + 1] === quote) i++;
      else return i + 1;
    }
  }
  return sql.length;
}

/** Block comments nest in PostgreSQL. */
function endOfBlockComment(sql: string, start: number): number {
  let depth = 0;
  for (let i = start; i < sql.length - 1; i++) {
    if (sql[i] === '/' && sql[i + 1] === '*') {
      depth++;
      i++;
    } else if (sql[i] === '*' && sql[i + 1] === '/') {
      depth--;
      i++;
      if (depth === 0) return i + 1;
    }
  }
  return sql.length;
}

/** Commands whose result is a set of rows. */
const rowCommands = new Set(['SELECT', 'VALUES', 'TABLE', 'SHOW', 'EXPLAIN', 'FETCH']);
/** What may follow a `WITH` list as the statement itself. */
const mainCommands = new Set(['SELECT', 'VALUES', 'TABLE', 'INSERT', 'UPDATE', 'DELETE', 'MERGE']);

/**
 * Whether the statement returns rows: a query (`SELECT`, `VALUES`, `WITH … SELECT`, …), or a
 * write with a top-level `RETURNING`. Several statements in one text (a migration file) count as
 * not returning rows.
 */
export function returnsRows(sql: string): boolean {
  const code = pieces(sql)
    .map((p) => (p.code ? p.text : ' '))
    .join('');
  let depth = 0;
  let first: string | undefined;
  let main: string | undefined;
  let returning = false;
  const tokens = code.match(/[A-Za-z_][A-Za-z0-9_$]*|[();]/g) ?? [];
  for (let t = 0; t < tokens.length; t++) {
    const token = tokens[t]!;
    if (token === '(') depth++;
    else if (token === ')') depth--;
    else if (token === ';') {
      if (depth === 0 && t < tokens.length - 1) return false;
    } else if (first === undefined) {
      first = token.toUpperCase(); // the command, even in parentheses: `(SELECT 1) UNION (SELECT 2)`
    } else if (depth === 0) {
      const word = token.toUpperCase();
      if (first === 'WITH' && main === undefined && mainCommands.has(word)) main = word;
      if (word === 'RETURNING') returning = true;
    }
  }
  const command = first === 'WITH' ? main : first;
  return returning || (command !== undefined && rowCommands.has(command));
}

/**
 * Rewrites `$n` placeholders into Knex's `?` and lists the bindings in the order the `?` appear:
 * `$n` maps by number, so a `$1` used twice is bound twice. Every literal `?` (a jsonb operator
 * such as `?|`, or one inside a string) is escaped as `\?`, which Knex sends as a plain `?`.
 */
export function toQuestionMarks(
  sql: string,
  params: readonly unknown[] = [],
): { text: string; bindings: unknown[] } {
  const bindings: unknown[] = [];
  let text = '';
  for (const piece of pieces(sql)) {
    const escaped = piece.text.replace(/\?/g, '\\?');
    if (!piece.code) {
      text += escaped;
      continue;
    }
    text += escaped.replace(/(^|[^A-Za-z0-9_$])\$(\d+)/g, (_match, lead: string, n: string) => {
      const index = Number(n) - 1;
      if (index < 0 || index >= params.length) {
        throw new InvalidArgumentError(`$${n} has no parameter (${params.length} given)`);
      }
      bindings.push(params[index]);
      return `${lead}?`;
    });
  }
  return { text, bindings };
}
