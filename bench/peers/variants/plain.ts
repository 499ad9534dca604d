import { createOrder } from '../business.js';
import { refused, succeeded, type Variant } from '../variant.js';

/** The business handler with nothing around it: every request is an execution. */
export const plain: Variant = {
  id: 'plain',
  label: 'plain handler',
  layout: 'function',
  mechanism: 'No dedupe: every request runs the transaction.',
  async start({ env, faults }) {
    return {
      async call(key, payload) {
        try {
          await createOrder(env.sql, env.schema, key, payload, faults);
          return succeeded();
        } catch (error) {
          return refused(error);
        }
      },
      async close() {},
    };
  },
};
