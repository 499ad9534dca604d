/**
 * `npm run build` (and `npm pack`, through `prepack`): idem's two builds from one src/, with the
 * project's own TypeScript (the pinned `typescript` devDependency), file for file:
 *
 * - dist/esm: ES modules, `tsc -p tsconfig.build.json`, as before; what `import 'idem'` loads, and
 *   the CLI (`bin`: its main module uses top-level await).
 * - dist/cjs: CommonJS, what `require('idem')` loads, on every Node 20 (not only 20.19+, whose
 *   require(esm) would load dist/esm too), under Jest's module loader, and for TypeScript 5.0–5.7
 *   CommonJS apps, which refuse to `require` an ES module (TS1479). The same program compiled a
 *   second time with `module: node16`, as if package.json said `"type": "commonjs"`, from the
 *   modules that package.json's exports name. `dist/cjs/package.json` says `"type": "commonjs"`.
 *
 * Two things differ between the builds, both done here:
 * - A module `X.ts` with a sibling `X-cjs.ts` is compiled from the sibling's text in the CommonJS
 *   build. One module has one: src/core/module-file.ts (`import.meta.url`, a syntax error in
 *   CommonJS; its sibling reads `__filename`). Everything that finds files shipped beside the code
 *   (migrations/, the console's assets, package.json) goes through it (src/core/package-files.ts).
 * - Dependencies that ship ES modules only cannot be `require`d before Node 20.19 / 22.12
 *   (canonicalize 4 cannot be `require`d at all: its exports have no `require` or `default`
 *   condition). The CommonJS build bundles each one with esbuild, from the file the ESM build
 *   loads (so the same code, at the lockfile's version), into dist/cjs/vendor/<name>.js, and points
 *   its `require`s there: today uuid 14, canonicalize 4 and superjson 2.2.7 (which no longer
 *   imports copy-anything, though it lists it). They are found by resolving each dependency as
 *   `require` would, so a new ESM-only dependency is bundled too (and printed). The ESM build
 *   imports them from node_modules as before. None holds state that two copies would need to share
 *   (superjson's instance is idem's own, src/steps/result-codec.ts), and none appears in the
 *   declarations (checked below). Replacing them was the other way: superjson's stored format
 *   could not change, and rewriting canonicalize or uuid's v7 would be new code to trust where
 *   bundling is their own.
 * - Peer dependencies are the app's: `require('@nestjs/common')` loads the app's Nest, CommonJS in
 *   Nest 10 and 11; the Nest 12 installed here ships ES modules only (it runs on Node versions with
 *   require(esm)), so TS1479/TS1541 are expected for peers in the CommonJS pass, and only there.
 *
 * Why not tshy or tsup (tried here: npm 11.19, Node 20.20, 2 cores):
 * - tshy 4.1.3 refuses `verbatimModuleSyntax`, which tsconfig.json sets for the whole repository
 *   ("incompatible with multi-dialect builds"). With a project tsconfig that turns it off, it built
 *   the ESM half and failed the CommonJS half on import.meta (TS1470) and the CLI's top-level await
 *   (TS1309), in 44 s. It marks src/ CommonJS while it builds by writing src/package.json, which a
 *   test run or an editor in the same checkout sees, and rewrites package.json's exports on every
 *   build. It installs 29 packages, 73 MB: TypeScript 6.0.3 and the native preview compiler, beside
 *   the pinned 5.9.3. It bundles nothing, so the ESM-only dependencies would still need this.
 * - tsup 9.0.0 (46 packages, 24 MB, esbuild 0.28 among them) bundles. In 37 s it built all 25 entry points, but CommonJS
 *   without code splitting (its default for CommonJS): each of the 25 .cjs files carries its own
 *   copy of the core (`class IdemError` 25 times), so `require('idem')` and `require('idem/pg')` are
 *   two copies in one app; import.meta came out empty in CommonJS without its shims; its
 *   declaration rollup warned of private types shared between entry points (TS2742 downstream).
 *   Its README: "not actively maintained anymore".
 * - This: no new tool but esbuild (already installed for tsx and vite; 0.28.2, pinned) for the
 *   vendored bundles; output file for file, so each build's module graph is src/'s and one
 *   `require` of two subpaths shares one core; errors point at src/. The two compilations run at
 *   once: 19–23 s here for the whole build (the ESM one alone took 22 s before).
 *
 * Usage: `tsx scripts/build.ts [--out DIR]` (default dist).
 */
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { build as esbuild } from 'esbuild';
import ts from 'typescript';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');

interface Manifest {
  dependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  exports: Record<string, { import: { default: string }; require: { default: string } }>;
}

const manifestPath = join(root, 'package.json');
const manifest = JSON.parse(readFileSync(manifestPath, 'utf8')) as Manifest;

/** The src/ module of each export: `./dist/esm/adapters/pg.js` → `src/adapters/pg.ts`. */
export function entryModules(): string[] {
  return Object.values(manifest.exports).map((entry) =>
    join(root, entry.import.default.replace(/^\.\/dist\/esm\//, 'src/').replace(/\.js$/, '.ts')),
  );
}

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    return entry.isDirectory() ? files(path) : [path];
  });
}

/** `X.ts` → `X-cjs.ts`, for every module under src/ with a CommonJS sibling. */
function commonJsSiblings(): Map<string, string> {
  const siblings = new Map<string, string>();
  for (const file of files(join(root, 'src'))) {
    if (!file.endsWith('-cjs.ts')) continue;
    const esm = file.replace(/-cjs\.ts$/, '.ts');
    if (!existsSync(esm)) throw new Error(`${relative(root, file)} has no ${relative(root, esm)} to replace`);
    siblings.set(esm, file);
  }
  return siblings;
}

/** The ESM pass: the tsc command line, in a child process, so that it runs beside the CJS pass. */
function buildEsm(outDir: string): Promise<void> {
  return new Promise((done, fail) => {
    const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
    const child = spawn(process.execPath, [tsc, '-p', 'tsconfig.build.json', '--outDir', outDir], {
      cwd: root,
      stdio: ['ignore', 'inherit', 'inherit'],
    });
    child.on('error', fail);
    child.on('close', (code) =>
      code === 0 ? done() : fail(new Error(`the ESM build (tsc -p tsconfig.build.json) exited with ${code}`)),
    );
  });
}

/** Dependencies (package.json `dependencies`) that `require()` cannot load before Node 20.19. */
export function esmOnlyDependencies(): string[] {
  const requireFromRoot = createRequire(manifestPath);
  return Object.keys(manifest.dependencies ?? {}).filter((name) => {
    let file: string;
    try {
      file = requireFromRoot.resolve(name);
    } catch {
      return true; // no `require` or `default` condition (canonicalize 4)
    }
    if (file.endsWith('.mjs')) return true;
    if (file.endsWith('.cjs') || !file.endsWith('.js')) return false;
    for (let dir = dirname(file); ; dir = dirname(dir)) {
      const pj = join(dir, 'package.json');
      if (existsSync(pj))
        return (JSON.parse(readFileSync(pj, 'utf8')) as { type?: string }).type === 'module';
      if (dirname(dir) === dir) return false;
    }
  });
}

const cjsManifestText = JSON.stringify({ ...manifest, type: 'commonjs' }, null, 2);

/** The CommonJS pass, with the compiler API: same options, `module: node16`, a CommonJS scope. */
function buildCommonJs(outDir: string, vendored: Set<string>): void {
  const configHost: ts.ParseConfigFileHost = {
    ...ts.sys,
    onUnRecoverableConfigFileDiagnostic: (d) => {
      throw new Error(ts.flattenDiagnosticMessageText(d.messageText, '\n'));
    },
  };
  const parsed = ts.getParsedCommandLineOfConfigFile(
    join(root, 'tsconfig.build.json'),
    {
      outDir,
      module: ts.ModuleKind.Node16,
      moduleResolution: ts.ModuleResolutionKind.Node16,
      // ESM syntax in CommonJS files compiles to require/exports only without it.
      verbatimModuleSyntax: false,
    },
    configHost,
  )!;
  const options = parsed.options;
  const host = ts.createCompilerHost(options);
  const siblings = commonJsSiblings();
  const readFile = host.readFile.bind(host);
  // The package's scope reads as CommonJS, and `X.ts` reads as `X-cjs.ts`: nothing on disk changes.
  host.readFile = (file) => {
    const path = resolve(file);
    if (path === manifestPath) return cjsManifestText;
    const sibling = siblings.get(path);
    return readFile(sibling ?? file);
  };
  const program = ts.createProgram({ rootNames: entryModules(), options, host });
  const emitted = program.emit();
  const diagnostics = ts.sortAndDeduplicateDiagnostics([
    ...ts.getPreEmitDiagnostics(program),
    ...emitted.diagnostics,
  ]);
  // TS1479 (a CommonJS file imports an ES module) and TS1541 (a type-only import of one) are
  // expected for two kinds of packages: the dependencies bundled below, whose `require` this build
  // points at their CommonJS bundle; and peer dependencies, which are the app's own copy: the
  // versions installed here may ship ES modules only (Nest 12) where a CommonJS app has CommonJS
  // ones (Nest 10 and 11), and Node 20.19+ loads the others with require(esm).
  const tolerated = [...vendored, ...Object.keys(manifest.peerDependencies ?? {})];
  const errors = diagnostics.filter(
    (d) =>
      d.category === ts.DiagnosticCategory.Error &&
      !((d.code === 1479 || d.code === 1541) && tolerated.some((name) => isImportOf(d, name))),
  );
  if (errors.length > 0) {
    const text = ts.formatDiagnosticsWithColorAndContext(errors, {
      getCanonicalFileName: (f) => f,
      getCurrentDirectory: () => root,
      getNewLine: () => '\n',
    });
    throw new Error(`the CommonJS build failed:\n${text}`);
  }
  for (const file of program.getSourceFiles()) {
    const path = resolve(file.fileName);
    if (siblings.has(path))
      console.log(`  commonjs: ${relative(root, path)} compiled from ${relative(root, siblings.get(path)!)}`);
  }
}

function isImportOf(d: ts.Diagnostic, name: string): boolean {
  if (!d.file || d.start === undefined) return false;
  const text = d.file.text.slice(d.start, d.start + (d.length ?? 0));
  return text === `'${name}'` || text === `"${name}"`;
}

/** Bundles each ESM-only dependency as CommonJS and points dist/cjs's `require`s at the bundle. */
async function vendor(cjsDir: string, names: string[]): Promise<void> {
  const vendorDir = join(cjsDir, 'vendor');
  mkdirSync(vendorDir, { recursive: true });
  for (const name of names) {
    // The file the ESM build loads (Node's `import` conditions), so both builds run the same code.
    const entry = fileURLToPath(import.meta.resolve(name));
    const packageDir = packageDirOf(entry);
    const pkg = JSON.parse(readFileSync(join(packageDir, 'package.json'), 'utf8')) as {
      version: string;
      license?: string;
    };
    const licenseFile = readdirSync(packageDir).find((f) => /^licen[cs]e/i.test(f));
    const license = licenseFile ? readFileSync(join(packageDir, licenseFile), 'utf8').trim() : '';
    const result = await esbuild({
      entryPoints: [entry],
      bundle: true,
      format: 'cjs',
      platform: 'node',
      target: 'node20',
      outfile: join(vendorDir, `${name}.js`),
      legalComments: 'inline',
      logLevel: 'warning',
      metafile: true,
      banner: {
        js: [
          '/*!',
          ` * ${name} ${pkg.version} (${pkg.license ?? 'see below'}), bundled as CommonJS for idem's CommonJS build`,
          ' * (scripts/build.ts): it ships ES modules only, which require() cannot load before Node 20.19.',
          ...license.split('\n').map((line) => ` * ${line}`.trimEnd()),
          ' */',
        ].join('\n'),
      },
    });
    const bundled = Object.keys(result.metafile.inputs)
      .map((input) => /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(input)?.[1])
      .filter((n): n is string => !!n);
    console.log(`  commonjs: bundled ${[...new Set(bundled)].join(' + ')} into dist/cjs/vendor/${name}.js`);
  }
  const specifier = new RegExp(`require\\("(${names.map(escapeRegExp).join('|')})"\\)`, 'g');
  for (const file of files(cjsDir)) {
    if (!file.endsWith('.js') || file.startsWith(vendorDir + sep)) continue;
    const text = readFileSync(file, 'utf8');
    const rewritten = text.replace(specifier, (_, name: string) => {
      let path = relative(dirname(file), join(vendorDir, `${name}.js`))
        .split(sep)
        .join('/');
      if (!path.startsWith('.')) path = `./${path}`;
      return `require("${path}")`;
    });
    if (rewritten !== text) writeFileSync(file, rewritten);
  }
}

/** node_modules/<name> (or node_modules/@scope/<name>) of a file inside it. */
function packageDirOf(file: string): string {
  const parts = file.split(sep);
  const at = parts.lastIndexOf('node_modules');
  if (at < 0) throw new Error(`${file} is not under node_modules`);
  return parts.slice(0, at + (parts[at + 1]!.startsWith('@') ? 3 : 2)).join(sep);
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
}

/** What must hold of dist/cjs, whatever the source: checked on every build. */
function checkCommonJs(cjsDir: string, vendored: string[]): void {
  const problems: string[] = [];
  for (const file of files(cjsDir)) {
    const text = readFileSync(file, 'utf8');
    const where = relative(root, file);
    if (file.endsWith('.js') && !file.includes(`${sep}vendor${sep}`)) {
      if (/\bimport\.meta\b/.test(text)) problems.push(`${where}: import.meta (a syntax error in CommonJS)`);
      // tsc writes top-level statements at column 0: an import or export there is ESM syntax.
      if (/^(import|export) /m.test(text)) problems.push(`${where}: ESM syntax`);
    }
    if (file.endsWith('.d.ts')) {
      for (const name of vendored) {
        if (text.includes(`'${name}'`) || text.includes(`"${name}"`)) {
          problems.push(`${where}: declarations import ${name}, an ES module for a CommonJS user`);
        }
      }
    }
  }
  if (problems.length > 0)
    throw new Error(`dist/cjs is not CommonJS as it must be:\n  ${problems.join('\n  ')}`);
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { out: { type: 'string', default: 'dist' } } });
  const out = resolve(root, values.out);
  rmSync(out, { recursive: true, force: true });
  const started = performance.now();
  const vendored = esmOnlyDependencies();
  const esm = buildEsm(join(out, 'esm'));
  // Runs while the ESM child compiles; it throws before awaiting it on a CommonJS error.
  let cjsError: unknown;
  try {
    buildCommonJs(join(out, 'cjs'), new Set(vendored));
    console.log(`  commonjs: compiled in ${seconds(started)} s`);
  } catch (error) {
    cjsError = error;
  }
  await esm
    .finally(() => console.log(`  esm: compiled in ${seconds(started)} s`))
    .catch((error: unknown) => {
      throw cjsError ?? error;
    });
  if (cjsError) throw cjsError;
  const cjsDir = join(out, 'cjs');
  writeFileSync(join(cjsDir, 'package.json'), `${JSON.stringify({ type: 'commonjs' }, null, 2)}\n`);
  await vendor(cjsDir, vendored);
  checkCommonJs(cjsDir, vendored);
  console.log(`built ${relative(root, out)}/esm and ${relative(root, out)}/cjs in ${seconds(started)} s`);
}

const seconds = (since: number) => ((performance.now() - since) / 1000).toFixed(1);

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().catch((error: unknown) => {
    console.error(error instanceof Error ? error.message : error);
    process.exit(1);
  });
}
