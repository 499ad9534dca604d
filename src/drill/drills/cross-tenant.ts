/**
 * Drill 6: keys are scoped by tenant. Tenant B sends A's key with the same payload: B must either
 * run independently (its own answer, no replay marker; with `--count-url`, one effect for B) or be
 * refused, and never see A's answer. B's credential is first checked with a key of its own, so a
 * refusal means isolation, not a wrong credential.
 */
import { compareBodies, isClientError, isSuccess } from '../answers.js';
import { checkBaseline, describeCount, skipped, Verdict, type Drill } from '../drill.js';

export const crossTenantDrill: Drill = {
  name: 'cross-tenant',
  title: "Another tenant with the same key never gets the first tenant's answer",
  async run(context) {
    const second = context.options.secondCredential;
    if (!second) return skipped('no --second-credential given');
    const verdict = new Verdict();
    const key = context.newKey();
    verdict.data.key = key;

    context.step("tenant B's credential with a key of its own");
    const own = await context.send(context.newKey(), { asSecondTenant: true });
    verdict.show('B, own key', context.describe(own));
    if (!checkBaseline(verdict, own, `tenant B's request (${second[0]} from --second-credential)`)) {
      return verdict.outcome('');
    }

    context.step("tenant A's request");
    const a = await context.send(key);
    verdict.show('A', context.describe(a));
    verdict.data.a = context.record(a);
    if (!checkBaseline(verdict, a)) return verdict.outcome('');

    const before = await context.count(true);
    context.step("tenant B with A's key");
    const b = await context.send(key, { asSecondTenant: true });
    const after = await context.count(true);
    verdict.show("B, A's key", context.describe(b));
    verdict.data.b = context.record(b);
    const match = b.body.length > 0 ? compareBodies(a.body, b.body) : 'different';
    verdict.data.bodyMatch = match;
    const counted = before !== undefined && after !== undefined;
    if (counted) {
      verdict.data.count = { before, after };
      verdict.show('B count', describeCount(before, after));
    }

    let how = '';
    if (isSuccess(b)) {
      verdict.check(
        context.replayed(b) !== true,
        `B's answer is marked ${context.options.replayHeader}: true: A's stored answer was served to B`,
      );
      if (counted) {
        verdict.check(
          after - before === 1,
          match === 'different'
            ? `B ran independently but B's count changed by ${after - before} (expected +1)`
            : `B got A's answer (${match}) and B's count changed by ${after - before}`,
        );
      } else {
        verdict.check(
          match === 'different',
          `B got A's answer (${match}); pass --count-url to tell a coincidence from a leak`,
        );
      }
      how = `B ran independently (${b.status}, its own answer)`;
    } else if (isClientError(b)) {
      verdict.check(match === 'different', `B was refused (${b.status}) but the refusal carries A's answer`);
      if (counted)
        verdict.check(after === before, `B was refused but B's count changed by ${after - before}`);
      how = `B was refused (${b.status})`;
    } else {
      verdict.fail(`B's request with A's key got ${b.status || b.error}`);
    }
    return verdict.outcome(how);
  },
};
