/**
 * Reading the repository's import graph with the TypeScript compiler, as `tsc` resolves it: the
 * layout tests (test/layout) check rules on it.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

/** The repository root, with a trailing separator. */
export const root = fileURLToPath(new URL('../../', import.meta.url));

/** A path relative to the repository root, with forward slashes. */
export const fromRoot = (path: string): string => relative(root, path).split(sep).join('/');

/** Every `.ts` file below `dir`, but in the folders named in `skip` (e.g. `node_modules`). */
export function typescriptFiles(dir: string, skip: readonly string[] = []): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return skip.includes(entry.name) ? [] : typescriptFiles(path, skip);
    return entry.name.endsWith('.ts') ? [path] : [];
  });
}

/** Every module specifier of a file: imports, re-exports, `import('…')` with a literal, `import x = require('…')`. */
export function specifiers(file: string): string[] {
  const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const visit = (node: ts.Node): void => {
    if ((ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) && node.moduleSpecifier) {
      if (ts.isStringLiteral(node.moduleSpecifier)) found.push(node.moduleSpecifier.text);
    } else if (
      ts.isCallExpression(node) &&
      node.expression.kind === ts.SyntaxKind.ImportKeyword &&
      node.arguments[0] &&
      ts.isStringLiteralLike(node.arguments[0])
    ) {
      found.push(node.arguments[0].text);
    } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument)) {
      const literal = node.argument.literal;
      if (ts.isStringLiteral(literal)) found.push(literal.text);
    } else if (ts.isExternalModuleReference(node) && ts.isStringLiteral(node.expression)) {
      found.push(node.expression.text);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

const options: ts.CompilerOptions = {
  module: ts.ModuleKind.NodeNext,
  moduleResolution: ts.ModuleResolutionKind.NodeNext,
};

/**
 * The repository file (root-relative) that `specifier`, imported from `file`, resolves to; undefined
 * for a package of node_modules or what resolves nowhere. Without tsconfig's paths: `idem/*`
 * resolves to nothing here, which is what a test of the public names wants.
 */
export function resolveInRepository(specifier: string, file: string): string | undefined {
  const resolved = ts.resolveModuleName(specifier, file, options, ts.sys).resolvedModule;
  if (!resolved || resolved.isExternalLibraryImport) return undefined;
  const to = fromRoot(resolved.resolvedFileName);
  return to.startsWith('..') ? undefined : to;
}
