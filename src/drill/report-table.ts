/** The report as a table for people: one row per drill, its evidence indented below it. */
import type { DrillResult, DrillStatus } from './drill.js';
import type { DrillReport } from './runner.js';

export interface TableOptions {
  /** ANSI colours for the result column. Default false; the CLI turns it on for a terminal. */
  color?: boolean;
}

const labels: Record<DrillStatus, string> = { passed: 'pass', failed: 'FAIL', skipped: 'skip' };
const colors: Record<DrillStatus, string> = { passed: '32', failed: '31', skipped: '33' };

export function renderTable(report: DrillReport, options: TableOptions = {}): string {
  const paint = (status: DrillStatus, text: string) =>
    options.color ? `\x1b[${colors[status]}m${text}\x1b[0m` : text;
  const nameWidth = Math.max(5, ...report.drills.map((d) => d.name.length));
  const lines: string[] = [];
  const seconds = (report.durationMs / 1000).toFixed(2);
  lines.push(
    `idem drill · ${report.target.method} ${report.target.url} · ${report.drills.length} drills in ${seconds} s`,
    '',
    `RESULT  ${'DRILL'.padEnd(nameWidth)}  FINDING`,
  );
  const indent = ' '.repeat(8 + nameWidth + 2);
  for (const drill of report.drills) {
    lines.push(
      `${paint(drill.status, labels[drill.status].padEnd(6))}  ${drill.name.padEnd(nameWidth)}  ${drill.summary}`,
    );
    lines.push(...detailLines(drill).map((line) => indent + line));
  }
  const { passed, failed, skipped } = report.totals;
  // Worded "N of M drills passed" on purpose: a bare "N passed, N failed" line would be read by CI
  // log scanners as a test runner's closing line.
  const verdict = report.ok ? 'PASS' : failed > 0 ? 'FAIL' : 'FAIL (no drill ran)';
  lines.push(
    '',
    `Result: ${options.color ? paint(report.ok ? 'passed' : 'failed', verdict) : verdict} · ` +
      `${passed} of ${report.drills.length} drills passed, ${failed} failed, ${skipped} skipped`,
  );
  return lines.join('\n') + '\n';
}

function detailLines(drill: DrillResult): string[] {
  const width = Math.max(0, ...drill.evidence.map((e) => e.label.length));
  return [
    ...drill.evidence.map((e) => `${e.label.padEnd(width)}  ${e.text}`),
    ...drill.failures.slice(1).map((f) => `also failed: ${f}`),
    ...drill.notes.map((n) => `note: ${n}`),
  ];
}
