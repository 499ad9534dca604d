/**
 * The JMESPath subset `key`, `payload` and `messageId` read (src/lambda/path.ts, an internal unit):
 * the expressions Powertools' documentation writes select what JMESPath selects, and anything
 * outside the subset is refused when the option is read, not when an event comes.
 */
import { describe, expect, it } from 'vitest';
import { isInvalidArgument } from 'idem';
import { isBodyMalformed } from 'idem/http';
import { compilePath } from '../../src/lambda/path.js';

const event = {
  transactionId: 'tx-1',
  requestContext: { identity: { user: 'alice' } },
  headers: { 'idempotency-key': 'k-1', 'Content-Type': 'application/json' },
  body: JSON.stringify({ user: 'alice', productId: 'p-9', order: { id: 42 } }),
  Records: [{ messageId: 'm-1' }, { messageId: 'm-2' }],
  encoded: Buffer.from('hello').toString('base64'),
};
const select = (expression: string, value: unknown = event) => compilePath(expression, 'key')(value);

describe('the path subset', () => {
  it.each([
    ['transactionId', 'tx-1'],
    ['requestContext.identity.user', 'alice'],
    ['headers."idempotency-key"', 'k-1'],
    ['headers.idempotency-key', 'k-1'],
    ['headers."Content-Type"', 'application/json'],
    ['powertools_json(body).order.id', 42],
    ['powertools_json(body).["user", "productId"]', ['alice', 'p-9']],
    ['powertools_json(body).[user, order.id]', ['alice', 42]],
    ['{user: requestContext.identity.user, tx: transactionId}', { user: 'alice', tx: 'tx-1' }],
    ['[transactionId, requestContext.identity.user]', ['tx-1', 'alice']],
    ['Records[0].messageId', 'm-1'],
    ['Records[-1].messageId', 'm-2'],
    ['powertools_base64(encoded)', 'hello'],
    ['@', event],
  ])('%s', (expression, expected) => {
    expect(select(expression)).toEqual(expected);
  });

  it('selects null where JMESPath finds nothing', () => {
    expect(select('missing')).toBeNull();
    expect(select('requestContext.missing.deeper')).toBeNull();
    expect(select('Records[5].messageId')).toBeNull();
    expect(select('transactionId.nested')).toBeNull();
    expect(select('powertools_json(missing).id')).toBeNull();
    expect(select('[missing, transactionId]')).toEqual([null, 'tx-1']);
  });

  it('refuses syntax outside the subset when the option is read', () => {
    for (const expression of [
      'Records[*].messageId',
      'Records[?x]',
      'a | b',
      'length(a)',
      'a.',
      '',
      '"open',
      'a b',
    ]) {
      expect(() => compilePath(expression, 'key'), expression).toThrow(expect.toSatisfy(isInvalidArgument));
    }
  });

  it('throws BodyMalformedError when powertools_json reads text that is not JSON', () => {
    expect(() => select('powertools_json(transactionId).id')).toThrow(expect.toSatisfy(isBodyMalformed));
  });
});
