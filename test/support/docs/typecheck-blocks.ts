/**
 * Type-checks the documentation's TypeScript blocks with the project's compiler settings (so
 * `idem/*` resolves to src, as in the README examples). Each block is a module of its own; the
 * names the prose gives them (`idem`, `sql`, `app`, …) are declared once, globally
 * (doc-globals.ts), so a block may use them without repeating the setup.
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { docGlobals } from './doc-globals.js';
import type { CodeBlock } from './markdown.js';

export interface BlockDiagnostic {
  block: CodeBlock;
  /** 1-based line in the markdown file. */
  line: number;
  message: string;
}

/** The repository's root directory, with a trailing slash. */
export const rootDir = fileURLToPath(new URL('../../../', import.meta.url));

/** The repository's tsconfig.json as the compiler reads it (its paths map each subpath to src). */
export function projectConfig(): ts.ParsedCommandLine {
  return ts.getParsedCommandLineOfConfigFile(
    `${rootDir}tsconfig.json`,
    {},
    {
      ...ts.sys,
      onUnRecoverableConfigFileDiagnostic: (d) => {
        throw new Error(ts.flattenDiagnosticMessageText(d.messageText, '\n'));
      },
    },
  )!;
}

export function typecheckBlocks(blocks: CodeBlock[]): BlockDiagnostic[] {
  // Inside the repository, so node_modules and tsconfig's paths resolve as for any source file.
  const dir = `${rootDir}.idem/doc-blocks-${process.pid}`;
  mkdirSync(dir, { recursive: true });
  try {
    const files = new Map<string, CodeBlock>();
    blocks.forEach((block, index) => {
      const path = `${dir}/${block.file.replace(/[^\w]/g, '_')}_${block.line}_${index}.ts`;
      // `export {}`: a module, so top-level await is allowed and names stay in the block.
      writeFileSync(path, `${block.lines.join('\n')}\nexport {};\n`);
      files.set(path, block);
    });
    const config = projectConfig();
    const globals = `${dir}/doc-globals.d.ts`;
    writeFileSync(globals, docGlobals);
    const program = ts.createProgram([...files.keys(), globals], { ...config.options, noEmit: true });
    const found: BlockDiagnostic[] = [];
    for (const diagnostic of ts.getPreEmitDiagnostics(program)) {
      const block = diagnostic.file ? files.get(diagnostic.file.fileName) : undefined;
      const message = ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n');
      if (!block) {
        // An error outside the blocks (in the globals, say) is the test's own.
        throw new Error(`${diagnostic.file?.fileName ?? '?'}: ${message}`);
      }
      const { line } = diagnostic.file!.getLineAndCharacterOfPosition(diagnostic.start ?? 0);
      found.push({ block, line: block.line + 1 + line, message });
    }
    return found;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
