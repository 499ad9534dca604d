/**
 * The claims worker's local queue (`concurrency`): slots that free up ask it for their next task,
 * and it claims for every slot that is waiting in one statement, so idle slots share a round trip
 * and a commit instead of paying one each. It never claims more than there are slots waiting: a
 * claimed task runs at once, so its lease is not spent sitting in a buffer (graphile-worker's
 * local queue keeps a buffer with a time-to-live instead; here nothing needs one).
 */

/** One slot's wait for a task: its task, nothing (the queue had none for it), or the error. */
interface Waiter<T> {
  resolve: (task: T | undefined) => void;
  reject: (error: unknown) => void;
}

export class LocalQueue<T> {
  private readonly waiters: Waiter<T>[] = [];
  private fetching = false;

  /** `claim(limit)`: claims up to `limit` tasks in one statement. */
  constructor(private readonly claim: (limit: number) => Promise<T[]>) {}

  /** The next task for a slot, or undefined when none was due when it asked. */
  take(): Promise<T | undefined> {
    return new Promise((resolve, reject) => {
      this.waiters.push({ resolve, reject });
      if (!this.fetching) void this.claimForWaiters();
    });
  }

  /**
   * One claim for the slots waiting now; slots that start waiting while it runs get the next one.
   * A failed claim is reported to one slot (the worker reports it once and backs off); the others
   * are told there was nothing and poll again after their interval.
   */
  private async claimForWaiters(): Promise<void> {
    this.fetching = true;
    // Slots that free up in the same turn of the event loop join this claim instead of each making
    // its own: tasks whose answers arrived in one read, and idle slots whose poll timers fire
    // together (timers of one instant run in one phase; setImmediate runs after all of them).
    await new Promise((resolve) => setImmediate(resolve));
    const served = this.waiters.splice(0);
    try {
      const tasks = await this.claim(served.length);
      served.forEach((waiter, i) => waiter.resolve(tasks[i]));
    } catch (error) {
      served[0]?.reject(error);
      for (const waiter of served.slice(1)) waiter.resolve(undefined);
    } finally {
      this.fetching = false;
      if (this.waiters.length > 0) void this.claimForWaiters();
    }
  }
}
