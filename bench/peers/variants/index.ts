import type { Variant } from '../variant.js';
import { expressIdem } from './express-idem.js';
import { expressIdempotency } from './express-idempotency.js';
import { expressPlain } from './express-plain.js';
import { idem } from './idem.js';
import { nodeIdempotency } from './node-idempotency.js';
import { plain } from './plain.js';
import { powertools } from './powertools.js';

/** Every variant, baselines first within each layout. */
export const variants: readonly Variant[] = [
  plain,
  idem,
  powertools,
  nodeIdempotency,
  expressPlain,
  expressIdem,
  expressIdempotency,
];

export function variantById(id: string): Variant {
  const found = variants.find((v) => v.id === id);
  if (!found) throw new Error(`no peer variant "${id}"`);
  return found;
}
