/**
 * The library's source, checked for the shape issue 26 gave it:
 * - every SQL statement is a typed function (core/statement.ts) that owns its parameter order, so
 *   no call of `.query(…)` in src/ passes a positional parameter array — but the adapters, which
 *   implement `query` for each driver, and the typed statements' own wrapper;
 * - no module in src/ is longer than 500 lines (the console's browser assets excepted): a file
 *   that grows past it holds more than one concept and is split by concept.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { fromRoot, root, typescriptFiles } from '../support/layout.js';

const src = join(root, 'src');

/** Where `query(text, [values])` is the implementation, not a call site of a statement. */
const queryImplementations = [
  'src/adapters/',
  'src/embedded/',
  'src/core/statement.ts',
  'src/core/sql.ts',
  // `idem example` prints a user's handler at work: its business SQL is the user's, not idem's.
  'src/cli/commands/example.ts',
];

const maxLines = 500;

/** Calls `x.query(text, [ … ])` in a module's text: the line of each. */
function positionalQueryCalls(file: string, text = readFileSync(file, 'utf8')): number[] {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const lines: number[] = [];
  const visit = (node: ts.Node): void => {
    if (
      ts.isCallExpression(node) &&
      ts.isPropertyAccessExpression(node.expression) &&
      node.expression.name.text === 'query' &&
      node.arguments.length >= 2 &&
      ts.isArrayLiteralExpression(node.arguments[1]!)
    ) {
      lines.push(source.getLineAndCharacterOfPosition(node.getStart()).line + 1);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return lines;
}

describe('the source’s shape', () => {
  const files = typescriptFiles(src);

  it('passes no positional parameter array to a query: statements are typed functions', () => {
    const found = files
      .filter((file) => !queryImplementations.some((prefix) => fromRoot(file).startsWith(prefix)))
      .flatMap((file) => positionalQueryCalls(file).map((line) => `${fromRoot(file)}:${line}`));
    expect(found).toEqual([]);
  });

  it('sees a positional call, however it is written, and not one in a comment', () => {
    const text = [
      '// await db.query(`SELECT 1`, [1]);',
      'await tx.query<{ id: number }>(',
      '  `SELECT $1::int AS id`,',
      '  [id],',
      ');',
      'await this.sql.query(statements.read, [tenant, key]);',
      'await readTask(db, { tenant, id });',
    ].join('\n');
    expect(positionalQueryCalls('probe.ts', text)).toEqual([2, 6]);
  });

  it(`keeps every module under ${maxLines} lines, but the browser assets`, () => {
    const long = files
      .filter((file) => !fromRoot(file).startsWith('src/console/assets/'))
      .map((file) => ({ file: fromRoot(file), lines: readFileSync(file, 'utf8').split('\n').length - 1 }))
      .filter(({ lines }) => lines > maxLines);
    expect(long).toEqual([]);
  });
});
