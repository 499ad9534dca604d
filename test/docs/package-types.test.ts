/**
 * The package's type declarations ask for no package a user did not install: for every subpath in
 * package.json's exports, the declarations it loads (its .d.ts and the ones they import) import
 * only idem's own dependencies and the packages the install table (docs/guide/getting-started.md)
 * lists for that subpath.
 * So an app type-checks with `skipLibCheck: false`. Declarations are emitted here as the build
 * emits them (tsconfig.build.json).
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { read } from '../support/docs/markdown.js';

const rootDir = fileURLToPath(new URL('../../', import.meta.url));
const out = mkdtempSync(join(tmpdir(), 'idem-declarations-'));
const manifest = JSON.parse(read('package.json')) as {
  exports: Record<string, { import: { types: string } }>;
  dependencies: Record<string, string>;
};

beforeAll(async () => {
  await promisify(execFile)(
    process.execPath,
    [
      join(rootDir, 'node_modules/typescript/bin/tsc'),
      '-p',
      'tsconfig.build.json',
      '--emitDeclarationOnly',
      '--outDir',
      out,
    ],
    { cwd: rootDir },
  );
}, 180_000);
afterAll(() => rmSync(out, { recursive: true, force: true }));

/** Bare module names the declaration file and everything it imports import (`node:` aside). */
function externalImports(entry: string): Set<string> {
  const seen = new Set<string>();
  const found = new Set<string>();
  const visit = (file: string) => {
    if (seen.has(file)) return;
    seen.add(file);
    // Comments aside: JSDoc examples name packages too.
    const text = readFileSync(file, 'utf8').replace(/\/\*[\s\S]*?\*\/|\/\/.*$/gm, '');
    for (const [, specifier] of text.matchAll(/(?:\bfrom|\bimport)\s*\(?\s*['"]([^'"]+)['"]/g)) {
      if (specifier!.startsWith('.')) {
        const target = resolve(dirname(file), specifier!.replace(/\.js$/, '.d.ts'));
        if (existsSync(target)) visit(target);
      } else if (!specifier!.startsWith('node:')) {
        const parts = specifier!.split('/');
        found.add(specifier!.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0]!);
      }
    }
  };
  visit(entry);
  return found;
}

/** The install table (docs/guide/getting-started.md): subpath → the packages it says to install beside idem. */
function installTable(): Map<string, Set<string>> {
  const guide = read('docs/guide/getting-started.md');
  const section = guide.slice(
    guide.indexOf('\n## Install\n'),
    guide.indexOf('\n## ', guide.indexOf('\n## Install\n') + 5),
  );
  const table = new Map<string, Set<string>>();
  for (const row of section.split('\n').filter((line) => line.startsWith('| `idem'))) {
    const [, subpaths, packages] = row.split('|').map((cell) => cell.trim());
    const names = [...packages!.matchAll(/`([^`]+)`/g)].map((m) => m[1]!.replace(/^@types\//, ''));
    for (const [, subpath] of subpaths!.matchAll(/`(idem(?:\/[\w-]+)?)`/g))
      table.set(subpath!, new Set(names));
  }
  return table;
}

it("imports, for each subpath's types, only what the install table lists for it", () => {
  const table = installTable();
  const own = new Set([...Object.keys(manifest.dependencies), 'idem']);
  for (const [path, entry] of Object.entries(manifest.exports)) {
    const subpath = path === '.' ? 'idem' : `idem/${path.slice(2)}`;
    const listed = table.get(subpath);
    expect(listed, `${subpath} in the install table`).toBeDefined();
    const declarations = join(out, entry.import.types.replace(/^\.\/dist\/esm\//, ''));
    expect(existsSync(declarations), declarations).toBe(true);
    const missing = [...externalImports(declarations)].filter((name) => !own.has(name) && !listed!.has(name));
    expect(
      missing,
      `${subpath}'s declarations import packages the install table does not list for it`,
    ).toEqual([]);
  }
});

it('finds a package the table leaves out (the check can fail)', () => {
  // idem/fastify's declarations import fastify: a table without it would be caught.
  const entry = join(out, manifest.exports['./fastify']!.import.types.replace(/^\.\/dist\/esm\//, ''));
  expect([...externalImports(entry)]).toContain('fastify');
});
