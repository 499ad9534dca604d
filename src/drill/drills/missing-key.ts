/**
 * Drill 4: where the server requires keys (`--require-key`), a request without a key, with an empty
 * key, or with a key longer than 255 characters (Stripe's and idem's limit) is refused with a 4xx
 * (400 expected) and has no effect.
 */
import { isClientError } from '../answers.js';
import { skipped, Verdict, type Drill } from '../drill.js';

const variants: readonly { label: string; value: string | null }[] = [
  { label: 'no key', value: null },
  { label: 'empty key', value: '' },
  { label: '300-character key', value: 'k'.repeat(300) },
];

export const missingKeyDrill: Drill = {
  name: 'missing-key',
  title: 'A missing or malformed key is refused',
  async run(context) {
    if (!context.options.requireKey) {
      return skipped('the server is not declared to require keys (pass --require-key to run this drill)');
    }
    const verdict = new Verdict();
    const before = await context.count();
    const answers: Record<string, unknown> = {};
    const statuses: number[] = [];
    for (const variant of variants) {
      context.step(`request with ${variant.label}`);
      const answer = await context.send(null, { keyValue: variant.value });
      statuses.push(answer.status);
      answers[variant.label] = context.record(answer);
      verdict.show(variant.label, context.describe(answer));
      if (
        verdict.check(
          isClientError(answer),
          `a request with ${variant.label} got ${answer.status || 'no answer'}, not a 4xx refusal`,
        )
      ) {
        if (answer.status !== 400)
          verdict.note(`${variant.label}: refused with ${answer.status}; 400 is expected`);
      }
    }
    verdict.data.answers = answers;
    await context.checkCount(
      verdict,
      before,
      0,
      (change) => `the refused requests changed the count by ${change}`,
    );
    return verdict.outcome(`refused: ${statuses.join(', ')}`);
  },
};
