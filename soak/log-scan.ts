/**
 * The most frequent error lines in the instances' logs, with timestamps and numbers blurred, so a
 * failing soak says at once what the instances were complaining about (a dispatcher that cannot
 * run its batch, a consumer that cannot reconnect) next to the counts.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

export function frequentErrors(runDir: string, top = 8): { line: string; count: number }[] {
  const counts = new Map<string, number>();
  for (const file of readdirSync(runDir).filter((f) => f.startsWith('app-') && f.endsWith('.log'))) {
    for (const raw of readFileSync(join(runDir, file), 'utf8').split('\n')) {
      if (!/error|failed|uncaught|unhandled|refused/i.test(raw) || raw.startsWith('---')) continue;
      const line = raw
        .replace(/^\d\d:\d\d:\d\d\.\d{3} /, '')
        .replace(/\b[0-9a-f]{8}-[0-9a-f-]{27}\b/gi, '<uuid>')
        .replace(/\d+/g, 'N')
        .slice(0, 240);
      counts.set(line, (counts.get(line) ?? 0) + 1);
    }
  }
  return [...counts]
    .map(([line, count]) => ({ line, count }))
    .sort((a, b) => b.count - a.count)
    .slice(0, top);
}
