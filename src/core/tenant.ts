/**
 * Tenants. Every idem table that holds per-tenant data leads its primary key with `tenant_id`, so a
 * database can be distributed by tenant (Citus) or split into cells, and every hot statement names
 * the one tenant it touches. Code that never names a tenant uses the default tenant, `''`: a value
 * no tenant name can take (names are 1–200 characters), so it never collides with a real one.
 */
import { InvalidArgumentError } from './errors.js';
import { validateName } from './keys.js';

/** The tenant of rows written without one: the empty string. */
export const defaultTenant = '';

/** Throws `InvalidArgumentError` unless `tenant` is the default tenant or a valid tenant name. */
export function validateTenant(tenant: unknown): asserts tenant is string {
  if (tenant === defaultTenant) return;
  validateName('tenant', tenant);
}

/**
 * The `tenants` option of background workers (dispatcher, processor, sender, claims worker,
 * sweeps): `undefined` means every tenant; otherwise a non-empty list of distinct tenants, each
 * valid (the default tenant `''` included, when its rows are to be handled too).
 */
export function validateTenants(tenants: readonly string[] | undefined): readonly string[] | undefined {
  if (tenants === undefined) return undefined;
  if (!isList(tenants) || tenants.length === 0) {
    throw new InvalidArgumentError('tenants must be a non-empty array (leave it out for every tenant)');
  }
  for (const tenant of tenants) validateTenant(tenant);
  if (new Set(tenants).size !== tenants.length) throw new InvalidArgumentError('tenants has duplicates');
  return [...tenants];
}

/** `Array.isArray` that keeps the element type of a readonly array (callers may pass anything at runtime). */
function isList(value: unknown): value is readonly string[] {
  return Array.isArray(value);
}
