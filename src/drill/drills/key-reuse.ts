/**
 * Drill 3: the same key with a different payload is refused (4xx; the IETF draft and idem answer
 * 422), has no effect, and never gets the first answer. To tell a refusal for the key from a
 * refusal of the payload itself, the changed payload is then sent with a fresh key and must pass.
 */
import { compareBodies, isClientError, isSuccess } from '../answers.js';
import { checkBaseline, describeCount, skipped, Verdict, type Drill } from '../drill.js';
import { alterPayload } from '../payload.js';

export const keyReuseDrill: Drill = {
  name: 'key-reuse',
  title: 'The same key with a different payload is refused',
  async run(context) {
    const { altBody } = context.options;
    const altered = altBody
      ? { body: altBody, change: 'the --alt-body payload' }
      : alterPayload(context.options.body);
    if (!altered) {
      return skipped(
        'cannot derive a different payload from a body that is empty or not JSON: pass --alt-body',
      );
    }
    const verdict = new Verdict();
    const key = context.newKey();
    verdict.data.key = key;
    verdict.data.change = altered.change;
    context.step('first request');
    const first = await context.send(key);
    verdict.show('first', context.describe(first));
    verdict.data.first = context.record(first);
    if (!checkBaseline(verdict, first)) return verdict.outcome('');

    const before = await context.count();
    context.step(`same key, changed payload (${altered.change})`);
    const reused = await context.send(key, { body: altered.body });
    const after = await context.count();
    verdict.show('changed', altered.change);
    verdict.show('same key', context.describe(reused));
    verdict.data.reused = context.record(reused);

    if (isSuccess(reused)) {
      const match = compareBodies(first.body, reused.body);
      verdict.fail(
        match === 'different'
          ? `the changed payload was accepted under the same key (${reused.status}) and ran as a new request`
          : `the changed payload was accepted under the same key (${reused.status}) and got the first answer back`,
      );
    } else {
      verdict.check(
        isClientError(reused),
        `the changed payload got ${reused.status || 'no answer'}, not a 4xx refusal`,
      );
    }
    if (isClientError(reused) && reused.status !== 422) {
      verdict.note(`refused with ${reused.status}; 422 is what the IETF draft and idem answer`);
    }
    if (!isSuccess(reused) && reused.body.length > 0) {
      verdict.check(
        compareBodies(first.body, reused.body) === 'different',
        'the refusal carries the first answer',
      );
    }
    if (before !== undefined && after !== undefined) {
      verdict.data.count = { before, after };
      verdict.show('count', `${describeCount(before, after)} across the refused request`);
      verdict.check(after === before, `the refused request changed the count by ${after - before}`);
    }

    if (isClientError(reused)) {
      context.step('changed payload with a fresh key (is the payload itself valid?)');
      const probe = await context.send(context.newKey(), { body: altered.body });
      verdict.show('fresh key', context.describe(probe));
      verdict.data.probe = context.record(probe);
      verdict.check(
        isSuccess(probe),
        `inconclusive: the changed payload is refused even with a fresh key (${probe.status}); pass --alt-body with another valid payload`,
      );
    }
    return verdict.outcome(`refused with ${reused.status}; the changed payload alone succeeds`);
  },
};
