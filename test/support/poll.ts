/**
 * Probes until `ok` accepts the value or `timeoutMs` passes, then returns the last value: the
 * caller's assertion on it says what was expected, instead of a bare timeout.
 */
export async function until<T>(
  probe: () => Promise<T>,
  ok: (v: T) => boolean,
  timeoutMs = 15_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (ok(value) || Date.now() > deadline) return value;
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Waits until `condition` holds, checking every `everyMs`; past `timeoutMs` it throws, naming `what`. */
export async function waitFor(
  condition: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs = 20_000,
  everyMs = 20,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}

/**
 * Runs `probe` every `everyMs` until `stop()`, which answers the longest a probe took and how many
 * ran (a probe of a service that must stay responsive while something else is slow).
 */
export function repeatEvery(everyMs: number, probe: () => Promise<unknown>) {
  let longest = 0;
  let count = 0;
  let running = true;
  const loop = (async () => {
    while (running) {
      const started = performance.now();
      await probe();
      longest = Math.max(longest, performance.now() - started);
      count++;
      await new Promise((resolve) => setTimeout(resolve, everyMs));
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return { longestMs: longest, count };
    },
  };
}
