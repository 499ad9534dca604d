/**
 * Drill 2: N identical requests with one key, sent at once, make one execution and N equivalent
 * answers. Black-box, "one execution" is observed as:
 *   - every answer (after retrying in-progress refusals) has the same status and an equivalent body
 *     (a second execution usually answers with another id);
 *   - when the server marks replays, at most one answer is not marked replayed;
 *   - with `--count-url`, the count grows by exactly one.
 * When the server sends no marker and no count URL is given, only the first holds, and the report
 * says so.
 */
import { bodyClass, compareBodies, excerpt, histogram, isSuccess } from '../answers.js';
import type { Drill } from '../drill.js';

export const concurrentDrill: Drill = {
  name: 'concurrent',
  title: 'Concurrent identical requests: one execution, equivalent answers',
  async run(context) {
    const n = context.options.concurrency;
    const { verdict, key, before } = await context.begin();
    verdict.data.concurrency = n;
    context.step(`${n} identical requests in flight`);
    const settled = await Promise.all(Array.from({ length: n }, () => context.sendSettled(key)));
    const answers = settled.map((s) => s.answer);
    const firstStatuses = settled.map((s) => s.statuses[0]!);
    const retried = settled.filter((s) => s.statuses.length > 1).length;
    verdict.show('sent', `${n} at once with one key`);
    verdict.show('first answers', histogram(firstStatuses));
    if (retried > 0) verdict.show('retried', `${retried} answered in-progress first and were retried`);

    const markers = answers.map((a) => context.replayed(a));
    const markersSeen = markers.some((m) => m !== undefined);
    const notReplayed = markers.filter((m) => m !== true).length;
    verdict.show(
      'final answers',
      histogram(answers.map((a) => a.status)) +
        (markersSeen ? `; ${n - notReplayed} marked replayed, ${notReplayed} not` : ''),
    );
    verdict.data.firstStatuses = firstStatuses;
    verdict.data.finalStatuses = answers.map((a) => a.status);
    verdict.data.notReplayed = markersSeen ? notReplayed : null;

    const statuses = new Set(answers.map((a) => a.status));
    verdict.check(
      statuses.size === 1,
      `the answers have ${statuses.size} different statuses: ${histogram(answers.map((a) => a.status))}`,
    );
    verdict.check(
      answers.every(isSuccess),
      `not every answer succeeded: ${histogram(answers.map((a) => a.status))}`,
    );

    // One representative answer per class of equivalent bodies, in order of first appearance.
    const representatives = new Map<string, (typeof answers)[number]>();
    for (const a of answers)
      if (!representatives.has(bodyClass(a.body))) representatives.set(bodyClass(a.body), a);
    const distinct = [...representatives.values()];
    verdict.data.distinctBodies = distinct.length;
    verdict.data.bodies = distinct.slice(0, 5).map((a) => excerpt(a.body, 200));
    const odd = answers.find((a) => !a.body.equals(answers[0]!.body));
    verdict.show(
      'bodies',
      distinct.length === 1
        ? `1 distinct (${odd ? compareBodies(answers[0]!.body, odd.body) : 'identical bytes'})`
        : `${distinct.length} distinct: ${distinct
            .slice(0, 3)
            .map((a) => excerpt(a.body, 60))
            .join(' | ')}${distinct.length > 3 ? ' | …' : ''}`,
    );
    verdict.check(
      distinct.length === 1,
      `${distinct.length} different bodies for one key: the request ran more than once`,
    );

    if (markersSeen) {
      verdict.check(
        notReplayed <= 1,
        `${notReplayed} answers are not marked replayed: the request ran ${notReplayed} times`,
      );
    }
    const change = await context.checkCount(
      verdict,
      before,
      1,
      (change) => `the count changed by ${change} for one intent sent ${n} times (expected +1)`,
    );
    if (change === undefined && !markersSeen) {
      verdict.note(
        `one execution is inferred from ${n} equivalent bodies only: the server sends no replay marker and no --count-url was given`,
      );
    }
    return verdict.outcome(
      `${n} answers, ${histogram(answers.map((a) => a.status))}, 1 distinct body` +
        (markersSeen ? `, ${notReplayed} not replayed` : '') +
        (change !== undefined ? `, count +${change}` : ''),
    );
  },
};
