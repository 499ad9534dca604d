import { afterEach, describe, expect, it } from 'vitest';
import { describeError } from '../../src/cli/errors.js';

function refused(port: number): Error {
  return Object.assign(new Error(`connect ECONNREFUSED 127.0.0.1:${port}`), {
    code: 'ECONNREFUSED',
    address: '127.0.0.1',
    port,
  });
}

describe('the one line for a refused connection', () => {
  const saved = process.env.DATABASE_URL;
  afterEach(() => {
    if (saved === undefined) delete process.env.DATABASE_URL;
    else process.env.DATABASE_URL = saved;
  });

  it("blames PostgreSQL only on DATABASE_URL's port; a broker's refusal names its own address", () => {
    process.env.DATABASE_URL = 'postgres://postgres@127.0.0.1:5433/app';
    expect(describeError(refused(5433), 'demo')).toBe(
      'cannot connect to PostgreSQL at 127.0.0.1:5433 (DATABASE_URL): connection refused; is the server running?',
    );
    // RabbitMQ restarting while the demo starts: it used to say "cannot connect to PostgreSQL".
    expect(describeError(refused(5672), 'demo')).toBe(
      'cannot connect to 127.0.0.1:5672: connection refused; is the server running?',
    );
    process.env.DATABASE_URL = 'postgres://postgres@db/app'; // no port: PostgreSQL's 5432
    expect(describeError(refused(5432), 'migrate')).toMatch(
      /^cannot connect to PostgreSQL at 127\.0\.0\.1:5432/,
    );
  });
});
