/**
 * Drill 1: a retry with the same key and payload gets the first answer again: same status, the
 * same body (byte for byte, or the same JSON), and the replay marker when the server sends one.
 */
import { compareBodies } from '../answers.js';
import { checkBaseline, type Drill } from '../drill.js';

export const replayDrill: Drill = {
  name: 'replay',
  title: 'A replay is equivalent to the first answer',
  async run(context) {
    const { verdict, key, before } = await context.begin();
    context.step('first request');
    const first = await context.send(key);
    verdict.show('first', context.describe(first));
    verdict.data.first = context.record(first);
    if (!checkBaseline(verdict, first)) return verdict.outcome('');

    context.step('replay with the same key');
    const { answer: replay, statuses } = await context.sendSettled(key);
    verdict.show(
      'replay',
      context.describe(replay) + (statuses.length > 1 ? ` (after ${statuses.join(' → ')})` : ''),
    );
    verdict.data.replay = { ...context.record(replay), statuses };

    verdict.check(
      replay.status === first.status,
      `the replay answered ${replay.status}, the first answer was ${first.status}`,
    );
    const match = compareBodies(first.body, replay.body);
    verdict.data.bodyMatch = match;
    verdict.show('body', match === 'different' ? 'different from the first answer' : match);
    verdict.check(
      match !== 'different',
      'the replay body differs from the first answer (the request ran again?)',
    );
    if (match === 'equivalent JSON') verdict.note('the replay is the same JSON but not the same bytes');

    const firstMarker = context.replayed(first);
    const replayMarker = context.replayed(replay);
    const { replayHeader } = context.options;
    verdict.data.markers = firstMarker !== undefined || replayMarker !== undefined;
    if (firstMarker === undefined && replayMarker === undefined) {
      verdict.note(`the server sends no ${replayHeader} header`);
    } else {
      verdict.check(firstMarker !== true, `the first answer to a fresh key is marked ${replayHeader}: true`);
      verdict.check(
        replayMarker === true,
        `the server marks answers with ${replayHeader} but the replay is not marked true`,
      );
    }

    await context.checkCount(
      verdict,
      before,
      1,
      (change) => `the count changed by ${change} for one intent sent twice (expected +1)`,
    );
    return verdict.outcome(
      `${first.status} then ${replay.status}${replayMarker ? ' replayed' : ''}; ${match}`,
    );
  },
};
