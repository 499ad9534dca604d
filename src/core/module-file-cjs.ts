/**
 * The CommonJS build's `module-file.ts` (scripts/build.ts compiles this file in its place): the
 * same export, from `__filename`. Never imported by name.
 */

/** The path of this module (its compiled copy under dist/cjs/). */
export const moduleFile: string = __filename;
