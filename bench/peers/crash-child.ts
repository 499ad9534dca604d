/**
 * The process that dies in the crash drill. It starts every variant named in its input, sends one
 * request to each, and when every handler has written its business row (the peers' transactions
 * have committed; idem's is still open) it kills itself with SIGKILL, before any idempotency layer
 * records completion. A request that ends before reaching that point is reported on stdout.
 */
import type { CrashChildInput } from './crash.js';
import { samplePayload } from './business.js';
import { createPeerEnvironment } from './environment.js';
import { loadVariant } from './variants/load.js';

const input = JSON.parse(process.argv[2] ?? '{}') as CrashChildInput;
const ids = Object.keys(input.keys);
let expected = ids.length;
let arrived = 0;

const arrive = (): Promise<void> => {
  arrived++;
  if (arrived === expected) process.kill(process.pid, 'SIGKILL');
  return new Promise<void>(() => {}); // the handler never returns: the process is about to die
};

// A drill that never reaches its crash point must not hang the benchmark.
setTimeout(() => {
  console.log(JSON.stringify({ watchdog: true, arrived, expected }));
  process.exit(2);
}, 30_000).unref();

const env = await createPeerEnvironment({
  databaseUrl: input.databaseUrl,
  redisUrl: input.redisUrl,
  poolSize: ids.length + 2,
  attach: { schema: input.schema, namespace: input.namespace },
  ...(input.recording ? { recording: input.recording } : {}),
});
const running = await Promise.all(
  ids.map(async (id) =>
    (await loadVariant(id)).start({ env, faults: { afterWrite: arrive }, inProgressMs: input.inProgressMs }),
  ),
);
await Promise.all(
  ids.map(async (id, i) => {
    const answer = await running[i]!.call(input.keys[id]!, samplePayload);
    // Only reached when the request ended before its write: report it and stop waiting for it.
    console.log(JSON.stringify({ variant: id, answer }));
    expected--;
    if (arrived === expected) process.kill(process.pid, 'SIGKILL');
  }),
);
