/**
 * How the Prisma and Knex adapters read statement text. Every statement idem itself sends is
 * checked through the real adapters (test/operations, test/adapters/orm.test.ts); these are the
 * shapes a user's own `tx.query` may add.
 */
import { describe, expect, it } from 'vitest';
import { returnsRows, toQuestionMarks } from '../../src/adapters/sql-text.js';
import { isIdemError, migrations } from 'idem';

describe('returnsRows (Prisma: $queryRawUnsafe or $executeRawUnsafe)', () => {
  it.each([
    ['SELECT 1', true],
    ['  select * from t', true],
    ['VALUES (1), (2)', true],
    ['TABLE t', true],
    ['SHOW lock_timeout', true],
    ['WITH a AS (SELECT 1) SELECT * FROM a', true],
    ['WITH RECURSIVE a(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM a WHERE n < 3) SELECT n FROM a', true],
    ['WITH a AS (UPDATE t SET x = 1 RETURNING id) SELECT count(*) FROM a', true],
    ['INSERT INTO t VALUES (1) RETURNING id', true],
    ['UPDATE t SET x = 1 WHERE id = $1 returning *', true],
    ['DELETE FROM t RETURNING id', true],
    ['INSERT INTO t SELECT 1', false],
    ['UPDATE t SET x = (SELECT 1)', false],
    ['WITH a AS (UPDATE t SET x = 1 RETURNING id) DELETE FROM u WHERE id IN (SELECT id FROM a)', false],
    ['WITH a AS (SELECT 1) INSERT INTO t SELECT * FROM a', false],
    ['DELETE FROM t', false],
    ["INSERT INTO t (note) VALUES ('RETURNING id')", false],
    ['INSERT INTO t ("returning") VALUES (1)', false],
    ['UPDATE t SET x = 1 -- RETURNING id', false],
    ['UPDATE t SET x = 1 /* RETURNING /* nested */ id */', false],
    ['DO $$ BEGIN PERFORM 1; END $$', false],
    ['CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $body$ SELECT 1 $body$', false],
    ['SET LOCAL lock_timeout = 100', false],
    ['SELECT 1; SELECT 2', false],
    ['SELECT 1;', true],
    ['(SELECT 1) UNION (SELECT 2)', true],
  ])('%s → %s', (text, rows) => {
    expect(returnsRows(text)).toBe(rows);
  });

  it('reads every migration file as a script (several statements, no rows)', () => {
    for (const m of migrations('idem')) expect(returnsRows(m.sql), m.name).toBe(false);
  });
});

describe('toQuestionMarks (Knex, MikroORM)', () => {
  it('binds $n by number, a reused $1 twice, and escapes every literal ?', () => {
    expect(toQuestionMarks('SELECT $2, $1, $2 WHERE doc ? $1', ['a', 'b'])).toEqual({
      text: 'SELECT ?, ?, ? WHERE doc \\? ?',
      bindings: ['b', 'a', 'b', 'a'],
    });
  });

  it('leaves $n and ? inside strings, identifiers, comments and dollar quotes as text', () => {
    const { text, bindings } = toQuestionMarks(
      `SELECT 'a $1 ?', E'it\\'s $1', "col$1", $tag$ $1 ? $tag$, $1 -- $2 ?\n/* $2 */`,
      ['x', 'y'],
    );
    expect(text).toBe(`SELECT 'a $1 \\?', E'it\\'s $1', "col$1", $tag$ $1 \\? $tag$, ? -- $2 \\?\n/* $2 */`);
    expect(bindings).toEqual(['x']);
  });

  it('keeps an array one binding and refuses a $n without a parameter', () => {
    expect(toQuestionMarks('SELECT $1::text[]', [['a', 'b']]).bindings).toEqual([['a', 'b']]);
    const error = (() => {
      try {
        return toQuestionMarks('SELECT $2', ['only one']);
      } catch (e) {
        return e;
      }
    })();
    expect(isIdemError(error) && error.code).toBe('IDEM_INVALID_ARGUMENT');
  });
});
