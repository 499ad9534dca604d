/**
 * `npm start` with no DATABASE_URL, as a newcomer meets it: the demo (demo/main.ts) on an embedded
 * PostgreSQL, in a folder of its own (as root, a private one: the server's data goes where the
 * `postgres` user can reach it).
 * - A second start on the same folder exits 1 within 15 s with one line naming the running server.
 * - After `kill -9` of the demo, which leaves its server running, the next start stops that server
 *   and works.
 * - Ctrl-C (SIGINT) stops the demo, its workers and the server: exit 0, no error output.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, expect, it } from 'vitest';
import { isAlive } from '../support/embedded.js';

const main = fileURLToPath(new URL('../../demo/main.ts', import.meta.url));
// By path: the demo runs in a folder of its own, where `--import tsx` would not resolve.
const tsx = new URL('../../node_modules/tsx/dist/loader.mjs', import.meta.url).href;
const cwd = mkdtempSync(join(tmpdir(), 'idem-demo-lifecycle-'));
const dataDirs = new Set<string>();
const children: ChildProcess[] = [];

/** Lines a start may print on stderr that are notices, not errors. */
const notices = [
  /^DATABASE_URL is not set/,
  /^the '\w+' user cannot enter .*: the embedded PostgreSQL keeps its data in /,
  /^stopping the PostgreSQL server that an earlier run left running in /,
];

interface Demo {
  child: ChildProcess;
  stdout: string;
  stderr: string;
  exited: Promise<number | null>;
}

function startDemo(): Demo {
  const env: NodeJS.ProcessEnv = { ...process.env, PORT: '0', PROVIDER_PORT: '0' };
  for (const name of ['DATABASE_URL', 'AMQP_URL', 'NATS_URL', 'PROVIDER_URL', 'IDEM_SCHEMA'])
    delete env[name];
  const child = spawn(process.execPath, ['--import', tsx, main], {
    cwd,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  const demo: Demo = {
    child,
    stdout: '',
    stderr: '',
    exited: new Promise((resolve) => child.on('exit', (code) => resolve(code))),
  };
  child.stdout.on('data', (chunk: Buffer) => (demo.stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (demo.stderr += chunk.toString()));
  return demo;
}

async function listening(demo: Demo): Promise<string> {
  const deadline = Date.now() + 90_000;
  for (;;) {
    const url = /idem demo listening on (http:\/\/\S+)/.exec(demo.stdout)?.[1];
    if (url) return url;
    if (demo.child.exitCode !== null || Date.now() > deadline) {
      throw new Error(`the demo did not start:\n${demo.stdout}\n${demo.stderr}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** The server's pid and port, and where its data is, from the folder's owner file. */
function owner(): { pid: number; serverPid: number; port: number; dataDir: string } {
  const record = JSON.parse(readFileSync(join(cwd, '.idem/postgres/owner.json'), 'utf8')) as ReturnType<
    typeof owner
  >;
  dataDirs.add(record.dataDir);
  return record;
}

const errorLines = (stderr: string) =>
  stderr
    .split('\n')
    .filter(Boolean)
    .filter((line) => !notices.some((notice) => notice.test(line)));

async function pay(url: string, key: string): Promise<number> {
  const response = await fetch(`${url}/v1/payments`, {
    method: 'POST',
    headers: {
      authorization: 'Bearer sk_test_acme',
      'idempotency-key': key,
      'content-type': 'application/json',
    },
    body: JSON.stringify({ amount: 1250, currency: 'eur', customer: 'alice' }),
  });
  await response.arrayBuffer();
  return response.status;
}

afterAll(async () => {
  for (const child of children)
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  // A server a SIGKILLed demo left behind: stopped by the next start, or here.
  for (const dataDir of dataDirs) {
    try {
      const pid = Number(readFileSync(join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
      if (isAlive(pid)) process.kill(pid, 'SIGQUIT');
    } catch {
      // stopped
    }
    rmSync(dataDir, { recursive: true, force: true });
  }
  rmSync(cwd, { recursive: true, force: true });
});

it('refuses a second start, survives kill -9, and stops cleanly on Ctrl-C', async () => {
  const first = startDemo();
  const url = await listening(first);
  expect(await pay(url, 'lifecycle-1')).toBe(201);
  const running = owner();
  expect(running.pid).toBe(first.child.pid);

  // A second start on the same folder: one line naming the running server, exit 1 (a start that
  // hung instead would fail on the test's timeout).
  const second = startDemo();
  expect(await second.exited).toBe(1);
  expect(errorLines(second.stderr)).toEqual([
    `idem: the embedded PostgreSQL data folder ${cwd}/.idem/postgres is in use by a running server (postgres pid ${running.serverPid}, port ${running.port}, started by pid ${running.pid}): stop that process (Ctrl-C where it runs, or kill ${running.pid}), or set DATABASE_URL`,
  ]);
  expect(await pay(url, 'lifecycle-2')).toBe(201); // the first one was not disturbed

  // kill -9 leaves the server running; the next start stops it and goes on.
  first.child.kill('SIGKILL');
  await first.exited;
  expect(isAlive(running.serverPid)).toBe(true);
  const third = startDemo();
  const thirdUrl = await listening(third);
  expect(isAlive(running.serverPid)).toBe(false);
  expect(third.stderr).toContain(`stopping the PostgreSQL server that an earlier run left running in`);
  expect(await pay(thirdUrl, 'lifecycle-1')).toBe(201); // the data survived: a replay
  const now = owner();

  // Ctrl-C: exit 0, nothing on stderr but notices, the server gone.
  third.child.kill('SIGINT');
  expect(await third.exited).toBe(0);
  expect(errorLines(third.stderr)).toEqual([]);
  expect(third.stdout.trimEnd().split('\n').at(-1)).toBe('stopping…');
  expect(isAlive(now.serverPid)).toBe(false);
});
