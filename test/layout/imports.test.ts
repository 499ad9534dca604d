/**
 * The library's layout, checked on its import graph (read with the TypeScript compiler, resolved as
 * `tsc` resolves it; `import type` counts, since a type cycle is a design cycle too):
 * - no import cycle in src/, but the named temporary exceptions below;
 * - no module under src/ imports the demo (demo/ is an application built on the library);
 * - layers point one way: core imports only core; the inbox does not import the outbox;
 *   observability does not import the operations it observes; claims, sagas and step helpers do
 *   not import the HTTP client's internals (but the named temporary exceptions below).
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { fromRoot, resolveInRepository, root, specifiers, typescriptFiles } from '../support/layout.js';

const src = join(root, 'src');

/**
 * Cycles that another change removes; each is `a.ts ↔ b.ts` (src-relative, sorted). A cycle that
 * is gone may stay listed until that change lands, then must be deleted from here.
 */
const temporaryCycles = new Set<string>([]);

/**
 * Imports of the HTTP client's internals by claims, sagas and steps that the resilience kernel
 * (issue 19, point 1, in core/resilience) is to replace: the failure classification
 * (`isRetryableFailure`) and the in-process backoff sequence (`DecorrelatedJitter`) still live in
 * client/. Delete each when its module imports core instead.
 */
const temporaryClientImports = new Set<string>([]);

interface Edge {
  from: string;
  to: string;
  specifier: string;
}

/** The import graph of src/: an edge per specifier that resolves to a file of this repository. */
function importGraph(): { files: string[]; edges: Edge[] } {
  const files = typescriptFiles(src).map(fromRoot);
  const edges: Edge[] = [];
  for (const from of files) {
    for (const specifier of specifiers(join(root, from))) {
      const to = resolveInRepository(specifier, join(root, from));
      if (to) edges.push({ from, to, specifier });
    }
  }
  return { files, edges };
}

/** Strongly connected components of more than one module (Tarjan): each holds at least one cycle. */
function cycles(files: string[], edges: Edge[]): string[][] {
  const next = new Map<string, string[]>(files.map((file) => [file, []]));
  for (const edge of edges) next.get(edge.from)?.push(edge.to);
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  let counter = 0;
  const connect = (node: string): void => {
    index.set(node, counter);
    low.set(node, counter);
    counter++;
    stack.push(node);
    onStack.add(node);
    for (const target of next.get(node) ?? []) {
      if (!next.has(target)) continue;
      if (!index.has(target)) {
        connect(target);
        low.set(node, Math.min(low.get(node)!, low.get(target)!));
      } else if (onStack.has(target)) {
        low.set(node, Math.min(low.get(node)!, index.get(target)!));
      }
    }
    if (low.get(node) !== index.get(node)) return;
    const component: string[] = [];
    let member: string;
    do {
      member = stack.pop()!;
      onStack.delete(member);
      component.push(member);
    } while (member !== node);
    if (component.length > 1) found.push(component.sort());
  };
  for (const file of files) if (!index.has(file)) connect(file);
  return found;
}

const inSrc = (path: string) => path.slice('src/'.length);
const { files, edges } = importGraph();

describe('the layout of src/', () => {
  it('reads the import graph', () => {
    // A graph that lost its edges would pass every rule below: make sure it found the imports.
    expect(files.length).toBeGreaterThan(100);
    expect(edges.length).toBeGreaterThan(files.length);
    expect(edges).toContainEqual({
      from: 'src/http/express.ts',
      to: 'src/http/options.ts',
      specifier: './options.js',
    });
  });

  it('has no import cycle, but the named temporary exceptions', () => {
    const unexpected = cycles(files, edges)
      .map((component) => component.map(inSrc).join(' ↔ '))
      .filter((cycle) => !temporaryCycles.has(cycle));
    expect(unexpected).toEqual([]);
  });

  it('finds a cycle when there is one', () => {
    const loop = [
      { from: 'src/a.ts', to: 'src/b.ts', specifier: './b.js' },
      { from: 'src/b.ts', to: 'src/c.ts', specifier: './c.js' },
      { from: 'src/c.ts', to: 'src/a.ts', specifier: './a.js' },
    ];
    expect(cycles(['src/a.ts', 'src/b.ts', 'src/c.ts', 'src/d.ts'], loop)).toEqual([
      ['src/a.ts', 'src/b.ts', 'src/c.ts'],
    ]);
  });

  it('never imports the demo', () => {
    const intoDemo = edges.filter(
      (edge) => edge.to.startsWith('demo/') || /(^|\/)demo\//.test(edge.specifier),
    );
    expect(intoDemo.map((edge) => `${edge.from} → ${edge.specifier}`)).toEqual([]);
  });

  it('points its layers one way', () => {
    const crossing = (from: string, to: string) =>
      edges
        .filter((edge) => edge.from.startsWith(`src/${from}/`) && edge.to.startsWith(`src/${to}/`))
        .map((edge) => `${inSrc(edge.from)} → ${inSrc(edge.to)}`);
    const outOfCore = edges
      .filter((edge) => edge.from.startsWith('src/core/') && !edge.to.startsWith('src/core/'))
      .map((edge) => `${inSrc(edge.from)} → ${inSrc(edge.to)}`);
    expect(outOfCore, 'core imports only core').toEqual([]);
    expect(crossing('inbox', 'outbox'), 'the inbox does not import the outbox').toEqual([]);
    expect(crossing('observability', 'operations'), 'observability does not import operations').toEqual([]);
    const clientInternals = ['claims', 'workflow', 'steps']
      .flatMap((layer) => crossing(layer, 'client'))
      .filter((edge) => !temporaryClientImports.has(edge));
    expect(clientInternals, "claims, sagas and steps do not import the HTTP client's internals").toEqual([]);
  });
});
