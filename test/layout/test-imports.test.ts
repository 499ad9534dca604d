/**
 * Tests use idem as its users do: through the package's names ('idem', 'idem/pg', 'idem/http', …,
 * the subpaths of package.json's `exports`, which vitest and tsconfig map to src/). A file under
 * test/ that imports a module of src/ by its path fails here, unless
 * - it tests a genuinely internal unit and the module is named for it in `internalUnits` (why
 *   included), or
 * - it is one of `notYetPublic`: files of the folders that other changes of issue 26 move onto the
 *   public names (any import of src/ allowed there, for now).
 * A subpath's own file imported by its path (`../../src/adapters/pg.js`) is refused everywhere but
 * in `notYetPublic`: write `idem/pg`. What resolves by a computed path (`import(file)`, e.g. the
 * surface test's loader) is not seen here.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { fromRoot, resolveInRepository, root, specifiers, typescriptFiles } from '../support/layout.js';

/**
 * Tests of internal units, each with the modules (root-relative; a folder ending in `/` holds all
 * its modules) it may import by path. An entry whose file no longer imports its module must go.
 */
const internalUnits: Record<string, { why: string; modules: string[] }> = {
  'test/lambda/path.test.ts': {
    why: 'the event-path evaluator behind eventKeyPath / payloadValidationPath, unit by unit',
    modules: ['src/lambda/path.ts'],
  },
  'test/support/embedded.ts': {
    why: 'the embedded PostgreSQL the suite starts: the one door the tests reach it through',
    modules: ['src/embedded/embedded-postgres.ts', 'src/embedded/process-info.ts'],
  },
  'test/adapters/record-with-commit.test.ts': {
    why: 'which transactions offer the adapters’ record-with-COMMIT capability (canCommitWith)',
    modules: ['src/core/sql.ts'],
  },
  'test/adapters/sql-text.test.ts': {
    why: 'the placeholder rewriting of the ORM adapters',
    modules: ['src/adapters/sql-text.ts'],
  },
  'test/api/error-codes.test.ts': {
    why: 'toMillis: a driver value that is no timestamp, an error no public call reaches on demand',
    modules: ['src/core/clock.ts'],
  },
  'test/cli/cli.test.ts': { why: 'the CLI’s internals', modules: ['src/cli/'] },
  'test/cli/errors.test.ts': { why: 'the CLI’s internals', modules: ['src/cli/'] },
  'test/cli/intents.test.ts': { why: 'the CLI’s internals', modules: ['src/cli/'] },
  'test/cli/sweep.test.ts': { why: 'the CLI’s internals', modules: ['src/cli/'] },
  'test/cli/webhooks.test.ts': { why: 'the CLI’s internals', modules: ['src/cli/'] },
  'test/pooler/settings.test.ts': {
    why: 'the CLI’s database settings through a pooler',
    modules: ['src/cli/database.ts'],
  },
  'test/drill/drill.test.ts': {
    why: 'the `idem drill` command and how a drill alters a payload',
    modules: ['src/cli/commands/drill.ts', 'src/drill/payload.ts'],
  },
  'test/core/failures.test.ts': {
    why: 'the failure rules one by one',
    modules: ['src/core/failures.ts'],
  },
  'test/core/polling-worker.test.ts': {
    why: 'the polling worker kernel every worker runs on',
    modules: ['src/core/worker/polling-worker.ts'],
  },
  'test/core/resilience.test.ts': {
    why: 'the resilience kernel: breaker, retry delays, abortable sleep',
    modules: [
      'src/core/resilience/circuit-breaker.ts',
      'src/core/resilience/retry-after.ts',
      'src/core/resilience/sleep.ts',
    ],
  },
  'test/core/sweeper.test.ts': {
    why: 'the batched sweep every module uses',
    modules: ['src/core/sweeper.ts'],
  },
  'test/hostile/console.test.ts': {
    why: 'crafts the console’s opaque cursors with hostile fields',
    modules: ['src/console/params.ts'],
  },
  'test/nestjs/nestjs.test.ts': {
    why: 'the Idem class, the token IdemModule provides the instance under (`idem` exports its type)',
    modules: ['src/operations/idem.ts'],
  },
  'test/pooler/listen.test.ts': {
    why: 'the outbox’s notification listener through PgBouncer',
    modules: ['src/outbox/listener.ts'],
  },
  'test/scale-out/distribution.test.ts': {
    why: 'every statement of every module, planned on Citus, must be pinned to one tenant',
    modules: [
      'src/claims/statements.ts',
      'src/inbox/statements.ts',
      'src/migrate/citus.ts',
      'src/operations/statements.ts',
      'src/outbox/statements.ts',
      'src/webhooks/entities.ts',
      'src/webhooks/sender/statements.ts',
      'src/webhooks/statements.ts',
      'src/workflow/statements.ts',
    ],
  },
};

/**
 * Files of the folders other changes of issue 26 move onto the public names: each may import any
 * module of src/ until that change lands. A file that no longer does may stay listed until then;
 * after it, this list only shrinks.
 */
const notYetPublic = new Set<string>(
  [
    'claims/claims.test.ts',
    'console/access.test.ts',
    'console/api.test.ts',
    'console/demo.test.ts',
    'console/helpers.test.ts',
    'console/live-load.test.ts',
    'console/support.ts',
    'inbox/inbox.test.ts',
    'migrate/migrate.test.ts',
    'operations/calls-hold-nothing.test.ts',
    'operations/completer.test.ts',
    'operations/concurrency.test.ts',
    'operations/fixtures/defined-payment-child.ts',
    'operations/fixtures/defined-payment.ts',
    'operations/fixtures/multi-step-child.ts',
    'operations/keyed-operations.test.ts',
    'operations/lost-response.test.ts',
    'operations/model.property.test.ts',
    'operations/multi-step.test.ts',
    'operations/replay-read.test.ts',
    'operations/step-failures.test.ts',
    'operations/typed-results.test.ts',
    'outbox/cli.test.ts',
    'outbox/concurrency.test.ts',
    'outbox/dispatcher.test.ts',
    'outbox/held-race.test.ts',
    'outbox/marked.test.ts',
    'outbox/support.ts',
    'webhooks/answer-latency.test.ts',
    'webhooks/discard.test.ts',
    'webhooks/ordering.test.ts',
    'webhooks/processor.test.ts',
    'webhooks/receiver.test.ts',
    'webhooks/round-trip.test.ts',
    'webhooks/sender-destinations.test.ts',
    'webhooks/sender.test.ts',
    'webhooks/support.ts',
    'webhooks/verifiers.test.ts',
    'workflow/sagas.test.ts',
    'workflow/support/activity-child.ts',
    'workflow/support/stepping-clock.ts',
    'workflow/temporal.test.ts',
    'workflow/typed-results.test.ts',
  ].map((file) => `test/${file}`),
);

/** One import of a module of the repository by a test file. */
interface Import {
  from: string;
  to: string;
  specifier: string;
}

type Target = string | { import?: Target; default?: Target; [condition: string]: Target | undefined };

/** The file of src/ behind each public name: `src/adapters/pg.ts` → `idem/pg`. */
function publicNames(): Map<string, string> {
  const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
    exports: Record<string, Target>;
  };
  const esmFile = (target: Target | undefined): string => {
    if (typeof target === 'string') return target;
    if (!target) throw new Error('a subpath without a target');
    return esmFile(target.import ?? target.default);
  };
  return new Map(
    Object.entries(manifest.exports).map(([subpath, target]) => [
      esmFile(target)
        .replace(/^\.\/dist\/(?:esm\/|cjs\/)?/, 'src/')
        .replace(/\.js$/, '.ts'),
      subpath === '.' ? 'idem' : `idem/${subpath.slice(2)}`,
    ]),
  );
}

/** Every import of a module of src/ by path, from every TypeScript file under test/. */
function importsOfSrc(): { files: string[]; imports: Import[]; byName: number } {
  const files = typescriptFiles(join(root, 'test'), ['node_modules', 'generated', 'nest-app']).map(fromRoot);
  const imports: Import[] = [];
  let byName = 0;
  for (const from of files) {
    for (const specifier of specifiers(join(root, from))) {
      if (/^idem(\/|$)/.test(specifier)) byName++;
      const to = resolveInRepository(specifier, join(root, from));
      if (to?.startsWith('src/')) imports.push({ from, to, specifier });
    }
  }
  return { files, imports, byName };
}

const allows = (modules: readonly string[], to: string) =>
  modules.some((module) => (module.endsWith('/') ? to.startsWith(module) : to === module));

/** What the rules refuse, one line each. */
function refused(imports: readonly Import[], names: ReadonlyMap<string, string>): string[] {
  return imports
    .filter((i) => !notYetPublic.has(i.from))
    .flatMap((i) => {
      const name = names.get(i.to);
      if (name) return [`${i.from}: '${i.specifier}' is ${name}: import '${name}'`];
      if (allows(internalUnits[i.from]?.modules ?? [], i.to)) return [];
      return [`${i.from}: '${i.specifier}' is internal (${i.to}), and the file is no listed internal unit`];
    });
}

const names = publicNames();
const { files, imports, byName } = importsOfSrc();

describe('the imports of the tests', () => {
  it('reads every test file and its imports', () => {
    // A reader that lost the imports would pass every rule below: make sure it found them.
    expect(files.length).toBeGreaterThan(150);
    expect(byName).toBeGreaterThan(200);
    expect(names.get('src/adapters/pg.ts')).toBe('idem/pg');
    expect(names.get('src/index.ts')).toBe('idem');
    expect(imports).toContainEqual({
      from: 'test/core/sweeper.test.ts',
      to: 'src/core/sweeper.ts',
      specifier: '../../src/core/sweeper.js',
    });
  });

  it('import src/ through the public names, but the internal units listed', () => {
    expect(refused(imports, names)).toEqual([]);
  });

  it('list no internal unit that no longer imports its modules', () => {
    const stale = Object.entries(internalUnits).flatMap(([file, { modules }]) =>
      modules
        .filter((module) => !imports.some((i) => i.from === file && allows([module], i.to)))
        .map((module) => `${file} → ${module}`),
    );
    expect(stale).toEqual([]);
  });

  it('refuses an internal import, and a public module by its path, when there is one', () => {
    const made = [
      { from: 'test/http/limits.test.ts', to: 'src/http/engine.ts', specifier: '../../src/http/engine.js' },
      { from: 'test/http/limits.test.ts', to: 'src/adapters/pg.ts', specifier: '../../src/adapters/pg.js' },
      {
        from: 'test/core/sweeper.test.ts',
        to: 'src/core/sweeper.ts',
        specifier: '../../src/core/sweeper.js',
      },
      { from: 'test/core/sweeper.test.ts', to: 'src/core/keys.ts', specifier: '../../src/core/keys.js' },
      {
        from: 'test/cli/sweep.test.ts',
        to: 'src/cli/commands/sweep.ts',
        specifier: '../../src/cli/commands/sweep.js',
      },
    ];
    expect(refused(made, names)).toEqual([
      "test/http/limits.test.ts: '../../src/http/engine.js' is internal (src/http/engine.ts), and the file is no listed internal unit",
      "test/http/limits.test.ts: '../../src/adapters/pg.js' is idem/pg: import 'idem/pg'",
      "test/core/sweeper.test.ts: '../../src/core/keys.js' is internal (src/core/keys.ts), and the file is no listed internal unit",
    ]);
  });
});
