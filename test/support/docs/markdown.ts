/** Fenced code blocks of the documentation, with where they are and what their info string says. */
import { readdirSync, readFileSync } from 'node:fs';

export interface CodeBlock {
  /** The file, relative to the repository root. */
  file: string;
  /** 1-based line of the opening fence. */
  line: number;
  /** The language: the info string's first word (`sh`, `ts`, …), or '' for none. */
  lang: string;
  /** The rest of the info string, e.g. `no-run: starts the demo`. */
  info: string;
  lines: string[];
}

export const root = new URL('../../../', import.meta.url);
export const read = (path: string): string => readFileSync(new URL(path, root), 'utf8');

/**
 * README.md, CONTRIBUTING.md, every markdown file under docs/ (the guide, the reference, the
 * operations pages, at any depth) and the examples' READMEs: every markdown file a reader is sent to.
 */
export function documentationFiles(): string[] {
  const docs = readdirSync(new URL('docs/', root), { recursive: true, encoding: 'utf8' })
    .map((name) => name.split('\\').join('/'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => `docs/${name}`);
  const examples = readdirSync(new URL('examples/', root), { withFileTypes: true })
    .filter((entry) => entry.isDirectory())
    .map((entry) => `examples/${entry.name}/README.md`)
    .filter((path) => {
      try {
        read(path);
        return true;
      } catch {
        return false;
      }
    });
  return ['README.md', 'CONTRIBUTING.md', ...docs.sort(), ...examples.sort()];
}

export function codeBlocks(markdown: string, file = ''): CodeBlock[] {
  const blocks: CodeBlock[] = [];
  let open: CodeBlock | undefined;
  markdown.split('\n').forEach((text, index) => {
    if (open) {
      if (text.startsWith('```')) {
        blocks.push(open);
        open = undefined;
      } else open.lines.push(text);
    } else if (text.startsWith('```')) {
      const fence = text.slice(3).trim();
      const space = fence.search(/\s/);
      open = {
        file,
        line: index + 1,
        lang: space < 0 ? fence : fence.slice(0, space),
        info: space < 0 ? '' : fence.slice(space).trim(),
        lines: [],
      };
    }
  });
  return blocks;
}
