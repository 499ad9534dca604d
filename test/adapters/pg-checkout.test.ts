import { EventEmitter } from 'node:events';
import { describe, expect, it } from 'vitest';
import { fromPg, type PgPoolLike } from 'idem/pg';

/**
 * A pg-pool hands a client over inside the socket event that finished its connection; a server
 * shutting down may send FATAL 57P01 in that same packet. The client then emits 'error' before a
 * promise continuation could attach a listener, and an 'error' with no listener ends the process.
 * This pool does the same thing deterministically: the client errors synchronously, right after
 * the connect callback returns.
 */
class DyingClient extends EventEmitter {
  released: Error | boolean | undefined = undefined;
  private dead = false;
  query(): Promise<{ rows: unknown[]; rowCount: number }> {
    if (this.dead)
      return Promise.reject(new Error('Client has encountered a connection error and is not queryable'));
    return Promise.resolve({ rows: [], rowCount: 0 });
  }
  die(): void {
    this.dead = true;
    const fatal = Object.assign(new Error('terminating connection due to administrator command'), {
      code: '57P01',
    });
    this.emit('error', fatal); // throws if nobody listens
  }
  release(error?: Error | boolean): void {
    this.released = error;
  }
}

describe('fromPg checks a client out with its error listener already attached', () => {
  it('a connection that dies in the packet that readied it fails the transaction, never the process', async () => {
    const client = new DyingClient();
    const pool = {
      connect(callback: (error: Error | undefined, client: DyingClient) => void) {
        callback(undefined, client);
        client.die();
      },
      query: () => client.query(),
    } as unknown as PgPoolLike;
    const sql = fromPg(pool);
    let ran = false;
    await expect(
      sql.transaction(async () => {
        ran = true;
      }),
    ).rejects.toThrow(/not queryable/);
    expect(ran).toBe(false); // BEGIN failed on the dead connection
    expect(client.released).toBeInstanceOf(Error); // destroyed, not returned to the pool
  });
});
