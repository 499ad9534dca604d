import { describe, expect, it } from 'vitest';
import { ReplayReadPolicy } from '../../src/operations/replay-read.js';

describe("readFirst: 'auto'", () => {
  it('starts reading, stops where first executions dominate, and reads again when retries come back', () => {
    const policy = new ReplayReadPolicy();
    expect(policy.shouldRead('create-order', 'auto')).toBe(true);
    for (let i = 0; i < 200; i++) policy.observe('create-order', false);
    expect(policy.shouldRead('create-order', 'auto')).toBe(false);
    expect(policy.shouldRead('other-operation', 'auto')).toBe(true); // per operation
    for (let i = 0; i < 5; i++) policy.observe('create-order', true);
    expect(policy.shouldRead('create-order', 'auto')).toBe(true);
  });

  it('leaves explicit settings alone', () => {
    const policy = new ReplayReadPolicy();
    for (let i = 0; i < 200; i++) policy.observe('op', false);
    expect(policy.shouldRead('op', true)).toBe(true);
    expect(policy.shouldRead('op', false)).toBe(false);
  });
});
