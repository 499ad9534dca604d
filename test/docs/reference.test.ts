/**
 * The reference (docs/reference/) cannot drift from the code: one page per subpath of package.json
 * `exports`, linked from the README's module map, whose tables name
 * - under "## Exports", exactly what the subpath exports (a rename or a new export fails here);
 * - under "## Options", for each `### \`XOptions\``, exactly the properties of that type;
 * - under "## Methods", for each `### \`Class\``, every public method of the class, and nothing it
 *   does not have.
 * The names are read from src through the compiler (tsconfig's paths map each subpath to its file).
 */
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { read } from '../support/docs/markdown.js';
import { projectConfig, rootDir } from '../support/docs/typecheck-blocks.js';

const manifest = JSON.parse(read('package.json')) as { exports: Record<string, unknown> };
const subpaths = Object.keys(manifest.exports).map((path) =>
  path === '.' ? 'idem' : `idem/${path.slice(2)}`,
);
const pageOf = (subpath: string) => `docs/reference/${subpath === 'idem' ? 'idem' : subpath.slice(5)}.md`;

const config = projectConfig();
const paths = config.options.paths!;
const entryOf = (subpath: string) => `${rootDir}${paths[subpath]![0]!.replace(/^\.\//, '')}`;
const program = ts.createProgram(subpaths.map(entryOf), { ...config.options, noEmit: true });
const checker = program.getTypeChecker();

function exportsOf(subpath: string): Map<string, ts.Symbol> {
  const source = program.getSourceFile(entryOf(subpath))!;
  const symbols = checker.getExportsOfModule(checker.getSymbolAtLocation(source)!);
  return new Map(
    symbols.map((s) => [s.name, s.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(s) : s]),
  );
}

const isHidden = (member: ts.Symbol) => {
  const declaration = member.declarations?.[0];
  const modifiers =
    declaration && ts.canHaveModifiers(declaration) ? ts.getModifiers(declaration) : undefined;
  return (
    member.name.startsWith('__') ||
    member.name.startsWith('#') ||
    !!modifiers?.some(
      (m) => m.kind === ts.SyntaxKind.PrivateKeyword || m.kind === ts.SyntaxKind.ProtectedKeyword,
    )
  );
};
const membersOf = (symbol: ts.Symbol) =>
  checker.getPropertiesOfType(checker.getDeclaredTypeOfSymbol(symbol)).filter((m) => !isHidden(m));

/** The text between `heading` (a line of its own) and the next heading of the same or a higher level. */
function section(markdown: string, heading: string): string | undefined {
  const level = heading.split(' ')[0]!.length;
  const lines = markdown.split('\n');
  const start = lines.indexOf(heading);
  if (start < 0) return undefined;
  const rest = lines.slice(start + 1);
  const end = rest.findIndex((line) => {
    const match = /^(#+) /.exec(line);
    return match !== null && match[1]!.length <= level;
  });
  return rest.slice(0, end < 0 ? undefined : end).join('\n');
}

/** The names in the first column of every table row of `text` (a cell may name several). */
function firstColumnNames(text: string): string[] {
  return text
    .split('\n')
    .filter((line) => line.startsWith('| `'))
    .flatMap((line) => [...line.split('|')[1]!.matchAll(/`([\w$]+)(?:\(\))?`/g)].map((m) => m[1]!));
}

const subsections = (text: string) =>
  [...text.matchAll(/^### `([\w$]+)`$/gm)].map((m) => [m[1]!, section(text, m[0])!] as const);

describe('the reference', () => {
  it('has a page per subpath, linked from the README', () => {
    expect(subpaths.length).toBeGreaterThanOrEqual(25);
    const readme = read('README.md');
    for (const subpath of subpaths) {
      expect(() => read(pageOf(subpath)), pageOf(subpath)).not.toThrow();
      expect(readme, `the README links ${subpath}`).toContain(`[\`${subpath}\`](${pageOf(subpath)})`);
    }
  });

  describe.each(subpaths)('%s', (subpath) => {
    const page = () => read(pageOf(subpath));
    const exported = exportsOf(subpath);

    it('lists exactly what the subpath exports', () => {
      const listed = firstColumnNames(section(page(), '## Exports') ?? '');
      expect([...new Set(listed)].sort(), `${pageOf(subpath)}, "## Exports"`).toEqual(
        [...exported.keys()].sort(),
      );
      expect(listed.length, 'each export listed once').toBe(new Set(listed).size);
    });

    it('lists exactly the properties of each options type it documents', () => {
      for (const [name, text] of subsections(section(page(), '## Options') ?? '')) {
        const symbol = exported.get(name);
        expect(symbol, `${name} is an export of ${subpath}`).toBeDefined();
        const properties = membersOf(symbol!).map((m) => m.name);
        expect(firstColumnNames(text).sort(), `${pageOf(subpath)}, options of ${name}`).toEqual(
          properties.sort(),
        );
      }
    });

    it('lists every public method of each class it documents, and only members it has', () => {
      for (const [name, text] of subsections(section(page(), '## Methods') ?? '')) {
        const symbol = exported.get(name);
        expect(symbol, `${name} is an export of ${subpath}`).toBeDefined();
        const members = membersOf(symbol!);
        const listed = firstColumnNames(text);
        const methods = members.filter((m) => m.flags & ts.SymbolFlags.Method).map((m) => m.name);
        expect(
          methods.filter((m) => !listed.includes(m)),
          `${pageOf(subpath)}: methods of ${name} not listed`,
        ).toEqual([]);
        const names = new Set(members.map((m) => m.name));
        expect(
          listed.filter((m) => !names.has(m)),
          `${pageOf(subpath)}: listed members ${name} does not have`,
        ).toEqual([]);
      }
    });
  });
});
