/**
 * The public API as reports, one per subpath of package.json's exports: etc/api/idem.api.md for
 * `idem`, etc/api/idem-pg.api.md for `idem/pg`, …, made by API Extractor (@microsoft/api-extractor,
 * pinned) from the declarations the build emits (dist/esm/**.d.ts). They are committed: a change
 * to the public API shows in review as a change to a report.
 *
 *   npm run api:update   build, then rewrite the reports (commit them with the change)
 *   npm run api:check    build, then fail when a report differs from the declarations
 *
 * CI checks them on the packed tarball (test/package/tarball.test.ts), so what is compared is what
 * npm publishes. All the entry points share one TypeScript program (API Extractor's
 * `CompilerState` with `additionalEntryPoints`): about 13 s for the 25 subpaths here, against 1.5–3 s
 * for each one on its own.
 *
 * Usage: `tsx scripts/api-report.ts [--update] [--package DIR]` (DIR: a built package, default
 * the checkout; its dist/esm is read).
 */
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, unlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import {
  CompilerState,
  Extractor,
  ExtractorConfig,
  ExtractorLogLevel,
  type IConfigFile,
  type ExtractorMessage,
} from '@microsoft/api-extractor';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
/** Where the reports live, in the checkout. */
export const reportFolder = join(root, 'etc', 'api');

interface Manifest {
  exports: Record<string, { import: { types: string } }>;
}

/** `.` → `idem`, `./pg` → `idem-pg`: the report's file name, without `.api.md`. */
export function reportName(subpath: string): string {
  return subpath === '.' ? 'idem' : `idem-${subpath.slice(2).replaceAll('/', '-')}`;
}

export interface ApiReportResult {
  /** Reports that differ from the declarations (or are missing), by file name. */
  changed: string[];
  /** Reports of subpaths that no longer exist. */
  stale: string[];
  /** API Extractor's errors (a compiler error in the declarations, a report it could not write). */
  errors: string[];
  /** Where the reports of the declarations as they are were written, for a diff. */
  tempFolder: string;
}

/** Makes every report from `packageDir`'s declarations; with `update`, writes them to etc/api. */
export function apiReports(options: { packageDir?: string; update?: boolean } = {}): ApiReportResult {
  const packageDir = resolve(options.packageDir ?? root);
  const packageJson = join(packageDir, 'package.json');
  const manifest = JSON.parse(readFileSync(packageJson, 'utf8')) as Manifest;
  const tempFolder = mkdtempSync(join(tmpdir(), 'idem-api-report-'));
  mkdirSync(reportFolder, { recursive: true });
  const entries = Object.entries(manifest.exports).map(([subpath, entry]) => ({
    name: reportName(subpath),
    file: join(packageDir, entry.import.types),
  }));
  const result: ApiReportResult = { changed: [], stale: [], errors: [], tempFolder };
  let compilerState: CompilerState | undefined;
  for (const entry of entries) {
    if (!existsSync(entry.file)) {
      result.errors.push(`${entry.file} is missing: build first (npm run build)`);
      continue;
    }
    const config = ExtractorConfig.prepare({
      configObject: configFor(
        packageDir,
        entry.file,
        entry.name,
        tempFolder,
        entries.map((e) => e.file),
      ),
      packageJsonFullPath: packageJson,
      configObjectFullPath: undefined,
    });
    compilerState ??= CompilerState.create(config, { additionalEntryPoints: entries.map((e) => e.file) });
    const run = Extractor.invoke(config, {
      localBuild: options.update ?? false,
      compilerState,
      messageCallback: (message: ExtractorMessage) => {
        if (message.logLevel === ExtractorLogLevel.Error)
          result.errors.push(`${entry.name}: ${message.formatMessageWithLocation(packageDir)}`);
        message.handled = true;
      },
    });
    if (run.apiReportChanged) result.changed.push(`${entry.name}.api.md`);
  }
  const expected = new Set(entries.map((e) => `${e.name}.api.md`));
  for (const file of readdirSync(reportFolder)) {
    if (!file.endsWith('.api.md') || expected.has(file)) continue;
    result.stale.push(file);
    if (options.update) unlinkSync(join(reportFolder, file));
  }
  return result;
}

function configFor(
  packageDir: string,
  entry: string,
  name: string,
  tempFolder: string,
  allEntries: string[],
): IConfigFile {
  const quiet = { logLevel: ExtractorLogLevel.None, addToApiReportFile: true };
  return {
    projectFolder: packageDir,
    mainEntryPointFilePath: entry,
    newlineKind: 'lf',
    compiler: {
      // The declarations alone, as an app's compiler reads them (skipLibCheck: the dependencies'
      // own declarations are theirs).
      overrideTsconfig: {
        compilerOptions: {
          target: 'es2022',
          module: 'nodenext',
          moduleResolution: 'nodenext',
          strict: true,
          skipLibCheck: true,
          experimentalDecorators: true,
          types: ['node'],
          typeRoots: [join(root, 'node_modules', '@types')],
        },
        files: allEntries,
      },
    },
    apiReport: {
      enabled: true,
      reportFileName: name,
      reportFolder,
      reportTempFolder: tempFolder,
      includeForgottenExports: false,
    },
    docModel: { enabled: false },
    dtsRollup: { enabled: false },
    tsdocMetadata: { enabled: false },
    messages: {
      compilerMessageReporting: { default: { logLevel: ExtractorLogLevel.Error } },
      extractorMessageReporting: {
        // Shown in the report itself (a type the entry point uses but does not export, …): a
        // change to those is a change of the API too.
        default: quiet,
        // idem marks no release stages (@public, @beta): everything exported is public.
        'ae-missing-release-tag': { logLevel: ExtractorLogLevel.None, addToApiReportFile: false },
        'ae-undocumented': { logLevel: ExtractorLogLevel.None, addToApiReportFile: false },
      },
      // idem's doc comments are JSDoc, not TSDoc: they are not what the report is about.
      tsdocMessageReporting: { default: { logLevel: ExtractorLogLevel.None, addToApiReportFile: false } },
    },
  };
}

function main(): void {
  const { values } = parseArgs({ options: { update: { type: 'boolean' }, package: { type: 'string' } } });
  const started = performance.now();
  const result = apiReports({
    ...(values.package ? { packageDir: values.package } : {}),
    update: values.update ?? false,
  });
  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  for (const error of result.errors) console.error(error);
  if (values.update) {
    const touched = [...result.changed, ...result.stale.map((f) => `${f} (deleted)`)];
    console.log(
      touched.length
        ? `etc/api: updated ${touched.join(', ')} (${seconds} s)`
        : `etc/api: up to date (${seconds} s)`,
    );
    rmSync(result.tempFolder, { recursive: true, force: true });
    process.exit(result.errors.length ? 1 : 0);
  }
  if (result.changed.length || result.stale.length || result.errors.length) {
    if (result.changed.length) {
      console.error(
        `The public API differs from etc/api in ${result.changed.join(', ')}.\n` +
          `The reports of the declarations as they are: ${result.tempFolder}\n` +
          `  diff -ru -x README.md etc/api ${result.tempFolder}\n` +
          'If the change is meant, run `npm run api:update` and commit etc/api with it.',
      );
    }
    if (result.stale.length)
      console.error(
        `etc/api has reports of subpaths that are gone: ${result.stale.join(', ')} (npm run api:update)`,
      );
    process.exit(1);
  }
  rmSync(result.tempFolder, { recursive: true, force: true });
  console.log(`etc/api: the public API matches its reports (${seconds} s)`);
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) main();
