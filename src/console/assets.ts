/**
 * The page: plain HTML, CSS and vanilla ES modules (one per view, and a few they share), read once
 * at startup. No build step. They live in src/console/assets, which the package ships
 * (package.json `files`): the source and both compiled copies (dist/esm, dist/cjs) read them there,
 * from the package's root.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { packagePath } from '../core/package-files.js';

export interface ConsoleAssets {
  page(basePath: string, schema: string): string;
  /**
   * The files under `assets/` by their path there (`console.js`, `views/outbox.js`): every
   * script and stylesheet of the folder, nothing else (the page's template is not one).
   */
  files: ReadonlyMap<string, { type: string; body: string }>;
}

/** The content type of each kind of asset; a file of another kind is not served. */
const types: Record<string, string> = {
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
};

function assetsFolder(): string {
  const path = join(packagePath('src', 'console', 'assets'), '/');
  if (existsSync(`${path}index.html`)) return path;
  throw new Error(`idem console: assets not found under ${path}`);
}

/** The paths of the scripts and stylesheets under `folder`, relative to it, with `/` between. */
function assetPaths(folder: string, under = ''): string[] {
  const paths: string[] = [];
  for (const entry of readdirSync(join(folder, under), { withFileTypes: true })) {
    const path = under === '' ? entry.name : `${under}/${entry.name}`;
    if (entry.isDirectory()) paths.push(...assetPaths(folder, path));
    else if (entry.isFile() && Object.hasOwn(types, extension(entry.name))) paths.push(path);
  }
  return paths.sort();
}

function extension(name: string): string {
  const dot = name.lastIndexOf('.');
  return dot === -1 ? '' : name.slice(dot);
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
    files: new Map(
      assetPaths(folder).map((path) => [path, { type: types[extension(path)]!, body: read(path) }]),
    ),
  };
  return cached;
}

export function escapeHtml(value: string): string {
  return value.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}
