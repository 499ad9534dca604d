/**
 * The events guide cannot drift from the code: its catalogue lists exactly the events that the
 * modules declare on the channel (each `declare module '…/core/event-channel.js'` block under src/,
 * plus core's own `error`), and every event there has its JSDoc.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../../', import.meta.url));

function typescriptFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return typescriptFiles(path);
    return entry.name.endsWith('.ts') ? [path] : [];
  });
}

/** Every member of `IdemEventMap`, where it is declared, and whether it has a JSDoc comment. */
function declaredEvents(): { name: string; file: string; documented: boolean }[] {
  const found: { name: string; file: string; documented: boolean }[] = [];
  for (const file of typescriptFiles(join(root, 'src'))) {
    const text = readFileSync(file, 'utf8');
    if (!text.includes('IdemEventMap')) continue;
    const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
    const visit = (node: ts.Node): void => {
      if (ts.isInterfaceDeclaration(node) && node.name.text === 'IdemEventMap') {
        for (const member of node.members) {
          if (!ts.isPropertySignature(member) || !member.name) continue;
          const name =
            ts.isStringLiteral(member.name) || ts.isIdentifier(member.name) ? member.name.text : '';
          const documented = ts.getJSDocCommentsAndTags(member).length > 0;
          found.push({ name, file: file.slice(root.length), documented });
        }
      }
      ts.forEachChild(node, visit);
    };
    visit(source);
  }
  return found;
}

describe('the event catalogue', () => {
  const events = declaredEvents();
  const guide = readFileSync(join(root, 'docs/guide/events.md'), 'utf8');
  const catalogue = guide.slice(guide.indexOf('\n## Every event\n'));
  const listed = [...catalogue.matchAll(/^\| `([a-z:-]+)`/gm)].map((m) => m[1]!);

  it('finds the events the modules declare', () => {
    expect(events.map((e) => e.name)).toEqual(
      expect.arrayContaining(['error', 'operation', 'outbox:published']),
    );
  });

  it('docs/guide/events.md lists exactly the declared events, each once', () => {
    expect([...listed].sort()).toEqual(events.map((e) => e.name).sort());
  });

  it('every event has its JSDoc where it is declared', () => {
    expect(events.filter((e) => !e.documented).map((e) => `${e.file}: ${e.name}`)).toEqual([]);
  });
});
