/** The report as JSON, for CI artefacts and other tools. Credentials are never in it. */
import type { DrillReport } from './runner.js';

export function renderJson(report: DrillReport): string {
  return JSON.stringify(report, null, 2) + '\n';
}
