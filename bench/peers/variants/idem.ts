import { createIdem } from '../../../src/operations/idem.js';
import { insertOrder } from '../business.js';
import { refused, succeeded, type Variant } from '../variant.js';

/** `idem.run` on `fromPg(pool)`: the claim, the business row and the stored result share one transaction. */
export const idem: Variant = {
  id: 'idem',
  label: 'idem',
  layout: 'function',
  mechanism:
    'Records the key in the business transaction, under the primary key of the requests table (by default one INSERT of the ' +
    'completed record at the end; `recording: claim` claims it first): the row, the key and the stored result commit or roll ' +
    'back together. A concurrent duplicate waits on the key, then replays; at commit its own row rolls back.',
  async start({ env, faults = {} }) {
    const engine = createIdem({
      sql: env.sql,
      schema: env.schema,
      ...(env.recording ? { recording: env.recording } : {}),
    });
    return {
      async call(key, payload) {
        try {
          const result = await engine.run(
            { tenant: 'acme', operation: 'create-order', key, request: payload },
            async (tx) => {
              await faults.beforeWrite?.();
              const order = await insertOrder(tx, env.schema, key, payload, faults.holdMs);
              await faults.afterWrite?.();
              return order;
            },
          );
          return succeeded(result.replayed ? 'replayed' : 'executed');
        } catch (error) {
          return refused(error);
        }
      },
      async close() {},
    };
  },
};
