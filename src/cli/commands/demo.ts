/**
 * `idem demo`: the payments demo is an application built on idem, not part of the library, so it
 * lives in the repository's `demo/` folder and is not in the published package. Run from a
 * checkout's TypeScript source (`npm start`, `npm run idem -- demo`), this command finds the demo
 * by path and runs it in this process; anywhere else it says where the demo is instead.
 */
import { existsSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { packagePath, packageRoot, runsFromSource } from '../../core/package-files.js';

type DemoCommand = { run(argv: string[]): Promise<number> };

/** The demo's command, by path, from the package's root (a checkout). */
const demoCommand = () => packagePath('demo', 'command.ts');

export async function run(argv: string[]): Promise<number> {
  const inCheckout = existsSync(demoCommand());
  // A compiled CLI (dist, or an installed package) cannot load the demo's TypeScript.
  const fromSource = runsFromSource;
  if (inCheckout && fromSource) {
    // A computed specifier: no library module imports the demo (test/layout checks it).
    const demo = (await import(pathToFileURL(demoCommand()).href)) as DemoCommand;
    return demo.run(argv);
  }
  const root = packageRoot();
  const where = inCheckout
    ? `the demo runs from this checkout's TypeScript source: run \`npm start\` (or \`npm run idem -- demo\`) in ${root}`
    : "the payments demo is not part of the installed package: it lives in idem's source repository; clone it, then run `npm ci && npm start` there";
  if (argv.includes('--help') || argv.includes('-h')) {
    console.log(`usage: idem demo [--port 3000] [--host 127.0.0.1]\n\nNot available here: ${where}.`);
    return 0;
  }
  console.error(`idem demo: ${where}`);
  return 1;
}
