import type { Variant } from '../variant.js';

/**
 * Loads only the variants a process needs. The crash drill's child uses it: every library it does
 * not import is start-up time it does not spend before the drill can run.
 */
const loaders: Record<string, () => Promise<Variant>> = {
  plain: async () => (await import('./plain.js')).plain,
  idem: async () => (await import('./idem.js')).idem,
  powertools: async () => (await import('./powertools.js')).powertools,
  'node-idempotency': async () => (await import('./node-idempotency.js')).nodeIdempotency,
  'express-plain': async () => (await import('./express-plain.js')).expressPlain,
  'express-idem': async () => (await import('./express-idem.js')).expressIdem,
  'express-idempotency': async () => (await import('./express-idempotency.js')).expressIdempotency,
};

export async function loadVariant(id: string): Promise<Variant> {
  const load = loaders[id];
  if (!load) throw new Error(`no peer variant "${id}"`);
  const variant = await load();
  if (variant.id !== id) throw new Error(`variant "${id}" loaded as "${variant.id}"`);
  return variant;
}
