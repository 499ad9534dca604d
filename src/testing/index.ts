/**
 * idem/testing: the seed's drills as a library. `runDrills` runs the black-box Idempotency-Key
 * drills (replay, concurrent duplicates, key reuse, missing key, lost response, cross-tenant)
 * against any endpoint; `ManualClock` drives expiry and leases in tests without sleeping.
 */
export * from '../drill/index.js';
export { createManualClock, type ManualClock } from '../core/clock.js';
