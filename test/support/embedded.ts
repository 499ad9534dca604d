/**
 * The embedded PostgreSQL the tests start: the shared server of the run (global-setup.ts) and the
 * servers of their own that some files stop and start again (a restart mid-run, a second cell),
 * and whether the server a run left behind is alive (the demo's lifecycle).
 * Not a public module — `idem demo` and the suite's own setup use it — so the tests reach it
 * through this one file.
 */
export { startEmbeddedPostgres, type EmbeddedDatabase } from '../../src/embedded/embedded-postgres.js';
/** Whether a process (a server a run left behind, say) is still alive. */
export { isAlive } from '../../src/embedded/process-info.js';
