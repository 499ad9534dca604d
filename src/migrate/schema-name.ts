/**
 * Moved to `core/schema-name.ts`: every module uses it, not only migrations. This re-export keeps
 * the modules that still import it from here (operations, workflow, console) building until they
 * move their import.
 * @deprecated Import from `../core/schema-name.js`.
 */
export * from '../core/schema-name.js';
