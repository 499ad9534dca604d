import { defaultTenant } from '../core/tenant.js';

/**
 * The tenant and the reason of an operator's decision (a discard, a skip) as its event reports
 * them: the default tenant when none was named, and no `reason` when none was given.
 */
export function decisionFields(options: { tenant?: string; reason?: string }): {
  tenant: string;
  reason?: string;
} {
  return {
    tenant: options.tenant ?? defaultTenant,
    ...(options.reason !== undefined ? { reason: options.reason } : {}),
  };
}
