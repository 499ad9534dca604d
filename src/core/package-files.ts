/**
 * Files idem ships beside its code: migrations/, src/console/assets/, package.json, and in a
 * checkout bench/ and demo/. Found from the package's root, the nearest folder above this module
 * whose package.json has a name, so the same code finds them from src/ (tests, tsx), dist/esm/ and
 * dist/cjs/ (dist/cjs/package.json only sets the module type, and has no name).
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { moduleFile } from './module-file.js';

let root: string | undefined;

/** The idem package's root folder (a checkout, or node_modules/idem). */
export function packageRoot(): string {
  if (root !== undefined) return root;
  for (let dir = dirname(moduleFile); ; dir = dirname(dir)) {
    const manifest = join(dir, 'package.json');
    if (existsSync(manifest) && (JSON.parse(readFileSync(manifest, 'utf8')) as { name?: unknown }).name) {
      return (root = dir);
    }
    if (dirname(dir) === dir) throw new Error(`idem: no package.json with a name above ${moduleFile}`);
  }
}

/** A path under the package's root: `packagePath('migrations')`. */
export function packagePath(...segments: string[]): string {
  return join(packageRoot(), ...segments);
}

/** Whether idem runs from its TypeScript source (a checkout, under tsx or vitest), not from dist/. */
export const runsFromSource: boolean = moduleFile.endsWith('.ts');
