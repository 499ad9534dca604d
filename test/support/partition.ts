import type { Sql } from 'idem';

/**
 * An `Sql` that can be cut off from the database like a process behind a network partition or in
 * a long GC pause: while cut, every new statement and transaction waits (none fails, none is
 * sent); `heal` lets them through. Statements already running finish normally.
 */
export function partitionable<Client>(sql: Sql<Client>) {
  let cut: Promise<void> | null = null;
  let heal = () => undefined as void;
  let waiting = 0;
  const through = async () => {
    while (cut) {
      waiting++;
      try {
        await cut;
      } finally {
        waiting--;
      }
    }
  };
  const wrapped: Sql<Client> = {
    async query(text, params, options) {
      await through();
      return sql.query(text, params, options);
    },
    async transaction(fn) {
      await through();
      return sql.transaction(fn);
    },
  };
  return {
    sql: wrapped,
    cut() {
      cut ??= new Promise<void>((resolve) => (heal = resolve));
    },
    heal() {
      cut = null;
      heal();
    },
    /** Statements held at the partition. */
    get waiting() {
      return waiting;
    },
  };
}
