import type { OutboxEvent, Publisher, PublishResult } from '../../src/outbox/types.js';

/**
 * A publisher for dispatcher tests: it "delivers" into an in-memory log and can be told to refuse
 * events or to be unreachable. It implements the real contract; the dispatcher under test is real.
 */
export class RecordingPublisher implements Publisher {
  readonly name = 'recording';
  /** Every accepted event, in the order accepted (duplicates included). */
  readonly accepted: OutboxEvent[] = [];
  /** Every call's batch. */
  readonly calls: OutboxEvent[][] = [];
  /** Events refused with a retryable error while the predicate holds. */
  refuse: (event: OutboxEvent) => boolean = () => false;
  /** Refuse with `retryable: false`. */
  permanent = false;
  /** When set, `publish` throws (the destination is unreachable). */
  unreachable = false;
  /** Called before answering, to interleave dispatchers. */
  delay: () => Promise<void> = async () => undefined;

  async publish(events: readonly OutboxEvent[]): Promise<readonly PublishResult[]> {
    this.calls.push([...events]);
    await this.delay();
    if (this.unreachable) throw Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
    return events.map((event): PublishResult => {
      if (this.refuse(event)) {
        return {
          id: event.id,
          ok: false,
          error: new Error(`refused ${event.type}`),
          retryable: !this.permanent,
        };
      }
      this.accepted.push(event);
      return { id: event.id, ok: true };
    });
  }

  ids(): string[] {
    return this.accepted.map((e) => e.id);
  }
}

/**
 * Checks per-key order in a log of publishes: an event may appear (again) only after every earlier
 * event of its key has appeared at least once. `order` gives each event's position in its key.
 */
export function orderViolations(log: readonly OutboxEvent[], order: Map<string, number>): string[] {
  const seen = new Map<string, Set<number>>();
  const violations: string[] = [];
  for (const event of log) {
    const position = order.get(event.id);
    if (position === undefined) continue;
    const key = `${event.topic}/${event.key}`;
    const done = seen.get(key) ?? new Set<number>();
    for (let earlier = 0; earlier < position; earlier++) {
      if (!done.has(earlier)) {
        violations.push(`${key}: #${position} published before #${earlier}`);
        break;
      }
    }
    done.add(position);
    seen.set(key, done);
  }
  return violations;
}
