/**
 * Drill 5: the response is lost in flight. The client sends the whole request, closes the
 * connection before reading anything, then retries with the same key. The retry must succeed, a
 * second retry must give an equivalent answer, and with `--count-url` there must be one effect.
 *
 * With a count URL the drill waits (within the timeout) until the lost request's effect shows,
 * so the retry exercises "already committed, answer lost"; without one it waits a short grace
 * period and the retry may also meet the first execution still running (then in-progress answers
 * are retried).
 */
import { compareBodies, isSuccess } from '../answers.js';
import { describeCount, type Drill } from '../drill.js';

/** Wait before the retry when no count URL shows the effect: long enough for a typical handler. */
const graceMs = 250;
const pollMs = 50;

export const lostResponseDrill: Drill = {
  name: 'lost-response',
  title: 'A response lost in flight: the retry gets the answer, one effect',
  async run(context) {
    const { verdict, key, before } = await context.begin();
    context.step('sending, then cutting the connection before the answer');
    const cut = await context.sendThenCut(key);
    verdict.data.cut = cut;
    verdict.show(
      'cut',
      cut.flushed
        ? `request flushed, connection closed after ${cut.ms} ms, no answer read`
        : `not sent: ${cut.error ?? 'unknown error'}`,
    );
    if (!verdict.check(cut.flushed, `the request could not be sent (${cut.error ?? 'unknown error'})`)) {
      return verdict.outcome('');
    }
    if (cut.answeredBeforeCut) verdict.note('an answer had started arriving before the cut');

    let committedBeforeRetry: boolean | undefined;
    if (before !== undefined) {
      context.step('waiting for the lost request to take effect');
      const deadline = performance.now() + context.options.timeoutMs;
      let seen = before;
      while (seen === before && performance.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, pollMs));
        seen = (await context.count())!;
      }
      committedBeforeRetry = seen !== before;
      verdict.show(
        'lost request',
        committedBeforeRetry
          ? `took effect (count ${describeCount(before, seen)})`
          : `no effect seen within ${context.options.timeoutMs} ms (the server may have rolled back on the disconnect)`,
      );
    } else {
      await new Promise((resolve) => setTimeout(resolve, graceMs));
    }

    context.step('retry with the same key');
    const retry = await context.sendSettled(key);
    verdict.show(
      'retry',
      context.describe(retry.answer) +
        (retry.statuses.length > 1 ? ` (after ${retry.statuses.join(' → ')})` : ''),
    );
    verdict.data.retry = { ...context.record(retry.answer), statuses: retry.statuses };
    verdict.check(
      isSuccess(retry.answer),
      `the retry after the lost response got ${retry.answer.status || retry.answer.error}, not a success`,
    );

    context.step('second retry');
    const again = await context.sendSettled(key);
    verdict.show('again', context.describe(again.answer));
    verdict.data.again = { ...context.record(again.answer), statuses: again.statuses };
    const match = compareBodies(retry.answer.body, again.answer.body);
    verdict.data.bodyMatch = match;
    verdict.check(
      again.answer.status === retry.answer.status && match !== 'different',
      `the second retry (${again.answer.status}) is not equivalent to the first retry (${retry.answer.status}, bodies ${match})`,
    );

    const markers = [retry.answer, again.answer].map((a) => context.replayed(a));
    if (markers.some((m) => m !== undefined)) {
      verdict.check(
        markers[1] === true,
        `the second retry is not marked ${context.options.replayHeader}: true`,
      );
      if (committedBeforeRetry) {
        verdict.check(
          markers[0] === true,
          'the lost request took effect, yet the retry is not marked replayed: it ran again',
        );
      }
    }
    const change = await context.checkCount(
      verdict,
      before,
      1,
      (change) => `the count changed by ${change} for one intent whose answer was lost (expected +1)`,
    );
    return verdict.outcome(
      `retry ${retry.answer.status}${markers[0] ? ' replayed' : ''}, second retry ${match}` +
        (change !== undefined ? `, count +${change}` : ''),
    );
  },
};
