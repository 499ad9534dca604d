/** What a drill is, what it gets to work with, and what it reports. */
import { randomUUID } from 'node:crypto';
import { describeAnswer, recordAnswer, replayMarker, type AnswerRecord } from './answers.js';
import { readCount } from './count.js';
import type { DrillName } from './drill-names.js';
import { withHeader, type HeaderList } from './headers.js';
import type { Answer, CutResult, DrillClient, OutgoingRequest } from './http-client.js';
import type { ResolvedDrillOptions } from './options.js';
import { sendSettled, type Settled } from './settle.js';

export type DrillStatus = 'passed' | 'failed' | 'skipped';

/** One line of evidence: `first  201 · 87 B · {"id":…}`. */
export interface Evidence {
  label: string;
  text: string;
}

/** What one drill found. */
export interface DrillResult {
  name: DrillName;
  title: string;
  status: DrillStatus;
  /** One sentence: why it passed, failed or was skipped. */
  summary: string;
  /** Every failed check, in order (empty when passed). */
  failures: string[];
  /** Remarks that do not fail the drill (a 400 where 422 is expected, a heuristic used). */
  notes: string[];
  evidence: Evidence[];
  /** Machine-readable details: answers, counts, keys. */
  data: Record<string, unknown>;
  durationMs: number;
}

export type DrillOutcome = Omit<DrillResult, 'name' | 'title' | 'durationMs'>;

export interface Drill {
  name: DrillName;
  title: string;
  run(context: DrillContext): Promise<DrillOutcome>;
}

/** Sending options a drill may vary. */
export interface SendOptions {
  /** Body to send instead of the configured one. */
  body?: Buffer | null;
  /** Use the second credential instead of the first. */
  asSecondTenant?: boolean;
  /** Raw key header value; `null` leaves the header out. */
  keyValue?: string | null;
}

/** Everything a drill uses: the target, a client, fresh keys, counts and progress. */
export class DrillContext {
  constructor(
    readonly options: ResolvedDrillOptions,
    readonly client: DrillClient,
    private readonly onStep: (message: string) => void,
  ) {}

  /** A fresh random key; no drill ever reuses another's. */
  newKey(): string {
    return `drill-${randomUUID()}`;
  }

  /**
   * A drill's opening: its verdict, a fresh key (in the verdict's evidence), and the effect count
   * before anything is sent (undefined without `--count-url`).
   */
  async begin(): Promise<{ verdict: Verdict; key: string; before: number | undefined }> {
    const verdict = new Verdict();
    const key = this.newKey();
    verdict.data.key = key;
    return { verdict, key, before: await this.count() };
  }

  /**
   * With `--count-url`: counts again, shows the change since `before`, and checks that it is
   * `expected` (`problem(change)` says what went wrong). Returns the change, or undefined when
   * nothing is counted.
   */
  async checkCount(
    verdict: Verdict,
    before: number | undefined,
    expected: number,
    problem: (change: number) => string,
  ): Promise<number | undefined> {
    const after = await this.count();
    if (before === undefined || after === undefined) return undefined;
    verdict.data.count = { before, after };
    verdict.show('count', describeCount(before, after));
    verdict.check(after - before === expected, problem(after - before));
    return after - before;
  }

  /** Reports what the drill is doing now. */
  step(message: string): void {
    this.onStep(message);
  }

  request(key: string | null, options: SendOptions = {}): OutgoingRequest {
    const keyValue = options.keyValue !== undefined ? options.keyValue : key;
    let headers = this.headers(options.asSecondTenant ?? false);
    if (keyValue !== null) headers = withHeader(headers, this.options.keyHeader, keyValue);
    return {
      url: this.options.url,
      method: this.options.method,
      headers,
      body: options.body !== undefined ? options.body : this.options.body,
    };
  }

  send(key: string | null, options: SendOptions = {}): Promise<Answer> {
    return this.client.send(this.request(key, options));
  }

  /** Sends, retrying in-progress answers (409/425/429) within the timeout. */
  sendSettled(key: string | null, options: SendOptions = {}): Promise<Settled> {
    return sendSettled(this.client, this.request(key, options), this.options.timeoutMs);
  }

  sendThenCut(key: string, options: SendOptions = {}): Promise<CutResult> {
    return this.client.sendThenCut(this.request(key, options));
  }

  /** The effect count from `--count-url`, or undefined when none was given. */
  async count(asSecondTenant = false): Promise<number | undefined> {
    const { countUrl, countPath } = this.options;
    if (!countUrl) return undefined;
    return readCount(this.client, countUrl, this.headers(asSecondTenant), countPath);
  }

  /** Whether the answer is marked replayed (undefined: not marked either way). */
  replayed(answer: Answer): boolean | undefined {
    return replayMarker(answer, this.options.replayHeader);
  }

  describe(answer: Answer): string {
    return describeAnswer(answer, this.options.replayHeader);
  }

  record(answer: Answer): AnswerRecord {
    return recordAnswer(answer, this.options.replayHeader);
  }

  private headers(asSecondTenant: boolean): HeaderList {
    const { headers, secondCredential } = this.options;
    if (!asSecondTenant || !secondCredential) return headers;
    return withHeader(headers, secondCredential[0], secondCredential[1]);
  }
}

/** Collects checks, evidence and notes while a drill runs, then gives its outcome. */
export class Verdict {
  readonly failures: string[] = [];
  readonly notes: string[] = [];
  readonly evidence: Evidence[] = [];
  readonly data: Record<string, unknown> = {};

  /** Records `failure` unless `ok`. Returns `ok`. */
  check(ok: boolean, failure: string): boolean {
    if (!ok) this.failures.push(failure);
    return ok;
  }

  fail(failure: string): void {
    this.failures.push(failure);
  }

  note(note: string): void {
    this.notes.push(note);
  }

  show(label: string, text: string): void {
    this.evidence.push({ label, text });
  }

  /** `passSummary` when every check held; the first failure otherwise. */
  outcome(passSummary: string): DrillOutcome {
    const failed = this.failures.length > 0;
    return {
      status: failed ? 'failed' : 'passed',
      summary: failed ? this.failures[0]! : passSummary,
      failures: [...this.failures],
      notes: [...this.notes],
      evidence: [...this.evidence],
      data: { ...this.data },
    };
  }
}

export function skipped(summary: string): DrillOutcome {
  return { status: 'skipped', summary, failures: [], notes: [], evidence: [], data: {} };
}

/** `4 → 5 (+1)`. */
export function describeCount(before: number, after: number): string {
  const delta = after - before;
  return `${before} → ${after} (${delta >= 0 ? '+' : ''}${delta})`;
}

/**
 * The check every drill starts with: a fresh key and the configured request must succeed, or
 * nothing else the drill sees means anything (wrong credentials, a body the endpoint refuses).
 */
export function checkBaseline(verdict: Verdict, answer: Answer, what = 'the first request'): boolean {
  return verdict.check(
    answer.status >= 200 && answer.status < 300,
    `${what} with a fresh key did not succeed (${answer.status === 0 ? (answer.error ?? 'no answer') : answer.status}): check the URL, --header credentials and --body`,
  );
}
