/**
 * Broker and cache URLs for tests. Locally a missing service skips its tests with a loud line;
 * under CI=true a missing URL is an error, so CI can never pass by skipping.
 */
export type ServiceName = 'AMQP_URL' | 'NATS_URL' | 'REDIS_URL';

export function serviceUrl(name: ServiceName): string | undefined {
  const url = process.env[name];
  if (url) return url;
  if (process.env.CI) throw new Error(`CI must set ${name}: tests that need it may not be skipped`);
  console.warn(`\n[idem tests] ${name} is not set: SKIPPING the tests that need it\n`);
  return undefined;
}

/**
 * What to do when a suite's program `what` is not installed: under CI=true an error (the suite may
 * not pass by skipping), locally a loud line saying that `skipping` is skipped and `hint`.
 */
export function notInstalled(what: string, skipping: string, hint: string): undefined {
  if (process.env.CI) throw new Error(`CI needs ${what}, which is not installed: ${hint}`);
  console.warn(`\n[idem tests] ${what} is not installed: SKIPPING ${skipping} (${hint})\n`);
  return undefined;
}
