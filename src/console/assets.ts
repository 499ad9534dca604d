/**
 * The page: plain HTML, CSS and one vanilla script, read once at startup. No build step. They live
 * in src/console/assets; a compiled copy (dist/console) looks there too, two folders up.
 */
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export interface ConsoleAssets {
  page(basePath: string, schema: string): string;
  files: Record<string, { type: string; body: string }>;
}

function assetsFolder(): string {
  const candidates = [
    new URL('./assets/', import.meta.url),
    new URL('../../src/console/assets/', import.meta.url),
  ];
  for (const candidate of candidates) {
    const path = fileURLToPath(candidate);
    if (existsSync(`${path}index.html`)) return path;
  }
  throw new Error('idem console: assets not found next to the module or under src/console/assets');
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
