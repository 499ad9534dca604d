/**
 * The page: plain HTML, CSS and one vanilla script, read once at startup. No build step. They live
 * in src/console/assets, which the package ships (package.json `files`): the source and both
 * compiled copies (dist/esm, dist/cjs) read them there, from the package's root.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { packagePath } from '../core/package-files.js';

export interface ConsoleAssets {
  page(basePath: string, schema: string): string;
  files: Record<string, { type: string; body: string }>;
}

function assetsFolder(): string {
  const path = join(packagePath('src', 'console', 'assets'), '/');
  if (existsSync(`${path}index.html`)) return path;
  throw new Error(`idem console: assets not found under ${path}`);
}

let cached: ConsoleAssets | undefined;

export function loadAssets(): ConsoleAssets {
  if (cached) return cached;
  const folder = assetsFolder();
  const read = (name: string) => readFileSync(`${folder}${name}`, 'utf8');
  const template = read('index.html');
  cached = {
    page: (basePath, schema) =>
      template.replaceAll('{{base}}', escapeHtml(basePath)).replaceAll('{{schema}}', escapeHtml(schema)),
    files: {
      'console.css': { type: 'text/css; charset=utf-8', body: read('console.css') },
      'console.js': { type: 'text/javascript; charset=utf-8', body: read('console.js') },
    },
  };
  return cached;
}

export function escapeHtml(value: string): string {
  return value.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}
