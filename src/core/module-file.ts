/**
 * This module's own file, the one place idem reads where its code is, in both builds:
 * `import.meta.url` is a syntax error in CommonJS, so the CommonJS build (scripts/build.ts)
 * compiles `module-file-cjs.ts`, which reads `__filename`, in this file's place. Everything else
 * finds its files through `package-files.ts`.
 */
import { fileURLToPath } from 'node:url';

/** The path of this module (src/core/module-file.ts, or its compiled copy under dist/). */
export const moduleFile: string = fileURLToPath(import.meta.url);
