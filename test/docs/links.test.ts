/**
 * Every relative link of the documentation resolves: README.md, CONTRIBUTING.md, CHANGELOG.md,
 * every page under docs/ and the examples' READMEs. A link to a file must name a file or folder of
 * the repository; a link with an anchor (`page.md#section`, or `#section` on the same page) must
 * name a heading of that page, as GitHub writes heading ids. Links in code blocks and inline code
 * are text, not links; web addresses are not checked here.
 */
import { existsSync, statSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { documentationFiles, read } from '../support/docs/markdown.js';

const rootDir = fileURLToPath(new URL('../../', import.meta.url));
const files = [...documentationFiles(), 'CHANGELOG.md'];

/** The markdown without fenced blocks and inline code, line by line (so line numbers still hold). */
function prose(markdown: string): string[] {
  let fenced = false;
  return markdown.split('\n').map((line) => {
    if (line.startsWith('```')) {
      fenced = !fenced;
      return '';
    }
    return fenced ? '' : line.replace(/`[^`]*`/g, '``');
  });
}

/** The id GitHub gives a heading: its text, lower-cased, punctuation dropped, spaces as hyphens. */
export function headingId(heading: string): string {
  const text = heading
    .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1') // a link's text
    .replace(/`/g, '')
    .replace(/\*\*|\*/g, '')
    .trim()
    .toLowerCase();
  return text.replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '').replace(/ /g, '-');
}

/** Every anchor a page offers: its headings' ids, repeats numbered as GitHub numbers them. */
export function anchorsOf(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const anchors = new Set<string>();
  let fenced = false;
  for (const line of markdown.split('\n')) {
    if (line.startsWith('```')) fenced = !fenced;
    const heading = !fenced && /^#{1,6} (.*)$/.exec(line);
    if (!heading) continue;
    const id = headingId(heading[1]!);
    const count = seen.get(id) ?? 0;
    seen.set(id, count + 1);
    anchors.add(count === 0 ? id : `${id}-${count}`);
  }
  return anchors;
}

interface Link {
  file: string;
  line: number;
  target: string;
}

function linksOf(file: string): Link[] {
  const links: Link[] = [];
  prose(read(file)).forEach((text, index) => {
    // Inline links and images: [text](target) or [text](target "title").
    for (const match of text.matchAll(/!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
      links.push({ file, line: index + 1, target: match[1]! });
    }
    // Reference definitions: [name]: target
    const definition = /^\s{0,3}\[[^\]]+\]:\s+<?(\S+?)>?(\s|$)/.exec(text);
    if (definition) links.push({ file, line: index + 1, target: definition[1]! });
  });
  return links;
}

const external = /^(?:[a-z][a-z0-9+.-]*:|\/\/)/i;
const links = files.flatMap(linksOf).filter((link) => !external.test(link.target));

describe('documentation links', () => {
  it('finds the links to check', () => {
    expect(files.length).toBeGreaterThan(40);
    expect(links.length).toBeGreaterThan(300);
  });

  it('sends every relative link to a file or folder of the repository', () => {
    const broken = links
      .filter((link) => !link.target.startsWith('#'))
      .filter((link) => {
        const path = decodeURIComponent(link.target.split('#')[0]!);
        return !existsSync(join(rootDir, dirname(link.file), path));
      })
      .map((link) => `${link.file}:${link.line} → ${link.target}`);
    expect(broken).toEqual([]);
  });

  it('sends every anchor to a heading of the page it names', () => {
    const anchors = new Map<string, Set<string>>();
    const anchorsIn = (file: string) => {
      if (!anchors.has(file)) anchors.set(file, anchorsOf(read(file)));
      return anchors.get(file)!;
    };
    const broken = links
      .filter((link) => link.target.includes('#'))
      .filter((link) => {
        const [path, anchor] = link.target.split('#') as [string, string];
        const target =
          path === '' ? link.file : normalize(join(dirname(link.file), decodeURIComponent(path)));
        if (!target.endsWith('.md')) return false; // an anchor into source code: a line, not a heading
        if (!existsSync(join(rootDir, target)) || statSync(join(rootDir, target)).isDirectory()) return true;
        return !anchorsIn(target).has(decodeURIComponent(anchor));
      })
      .map((link) => `${link.file}:${link.line} → ${link.target}`);
    expect(broken).toEqual([]);
  });

  it('derives heading ids as GitHub does', () => {
    expect(headingId('Pipelining (node-postgres `pipeline: true`)')).toBe(
      'pipelining-node-postgres-pipeline-true',
    );
    expect(headingId("8. A broker's exactly-once never replaces idempotent side effects")).toBe(
      '8-a-brokers-exactly-once-never-replaces-idempotent-side-effects',
    );
    expect(headingId('Peers (`bench/peers.bench.ts`)')).toBe('peers-benchpeersbenchts');
    expect([...anchorsOf('# A\n## Options\n### Options\n```\n# not a heading\n```\n')]).toEqual([
      'a',
      'options',
      'options-1',
    ]);
  });
});
