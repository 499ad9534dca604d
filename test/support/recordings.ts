import type { IdemOptions } from 'idem';

/** How `run`/`runIn` record a key: `'commit'` or `'claim'` (`IdemOptions.recording`). */
export type Recording = NonNullable<IdemOptions['recording']>;

/**
 * Both ways `run`/`runIn` record a key. Suites about single-transaction operations run under each:
 * the guarantees (one effect per intent, mismatch refused, failures store nothing) hold for both.
 */
export const recordings: readonly Recording[] = ['commit', 'claim'];
