import { describe, expect, it } from 'vitest';
import { isIdemError } from '../../src/core/errors.js';
import { eventsNotMarked, markedRows } from '../../src/outbox/marked.js';
import type { OutboxEvent } from '../../src/outbox/types.js';

const event = (tenant: string, id: string): OutboxEvent => ({
  tenant,
  id,
  topic: 't',
  key: 'k',
  type: 'x',
  payload: null,
  headers: {},
  createdAt: 0,
  attempts: 0,
});

describe('what the mark found, checked against what was published', () => {
  const a = event('', '00000000-0000-7000-8000-000000000001');
  const b = event('acme', '00000000-0000-7000-8000-000000000001');
  const c = event('acme', '00000000-0000-7000-8000-000000000002');

  it('every event found where the claim read it: nothing left to mark', () => {
    expect(
      eventsNotMarked(
        [a, b, c],
        JSON.stringify([
          ['acme', c.id],
          ['', a.id],
          ['acme', b.id],
        ]),
      ),
    ).toEqual([]);
  });

  it('returns the events not found, told apart by tenant when two tenants share an id', () => {
    expect(eventsNotMarked([a, b, c], JSON.stringify([['', a.id]]))).toEqual([b, c]);
  });

  it('null: the mark found the batch itself (same count and sum of seq), nothing to check', () => {
    expect(eventsNotMarked([a, b], null)).toEqual([]);
  });

  it("sends the count and the exact sum of the rows' seq, past 2^53", () => {
    const rows = [
      { row: '(0,1)', seq: '9007199254740993' },
      { row: '(0,2)', seq: '9007199254740995' },
    ];
    expect(JSON.parse(markedRows(rows))).toEqual({
      rows: ['(0,1)', '(0,2)'],
      n: 2,
      sum: '18014398509481988',
    });
    expect(JSON.parse(markedRows([]))).toEqual({ rows: [], n: 0, sum: '0' });
  });

  it('refuses a row that is not one of the batch events, with a retryable concurrent-change error', () => {
    let caught: unknown;
    try {
      eventsNotMarked(
        [a, c],
        JSON.stringify([
          ['', a.id],
          ['zeta', c.id],
        ]),
      );
    } catch (error) {
      caught = error;
    }
    expect(isIdemError(caught)).toBe(true);
    expect(caught).toMatchObject({ code: 'IDEM_CONCURRENT_CHANGE', retryable: true });
  });
});
