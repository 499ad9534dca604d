import { parseArgs } from 'node:util';
import { createIdem } from '../../operations/idem.js';
import { openDatabase } from '../database.js';

/** `idem sweep [--schema idem] [--batch-size 1000] [--pause-ms 20]`: expires keys in bounded batches. */
export async function run(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      schema: { type: 'string', default: 'idem' },
      'batch-size': { type: 'string', default: '1000' },
      // A short pause between batches leaves room for live traffic: flat out, a sweep halved
      // first-execution throughput beside it (0.53×, bench/scaling.bench.ts).
      'pause-ms': { type: 'string', default: '20' },
    },
  });
  const db = await openDatabase();
  try {
    const idem = createIdem({ sql: db.sql, schema: values.schema });
    const started = performance.now();
    const result = await idem.sweep({
      batchSize: Number(values['batch-size']),
      pauseMs: Number(values['pause-ms']),
    });
    const seconds = (performance.now() - started) / 1000;
    console.log(
      `cleared ${result.resultsCleared} expired results, deleted ${result.rowsDeleted} rows in ${seconds.toFixed(2)} s`,
    );
    return 0;
  } finally {
    await db.close();
  }
}
