/**
 * `idem drill`: black-box conformance drills for any Idempotency-Key endpoint. Also usable as a
 * library, e.g. from a test: `const report = await runDrills({ url, body, headers }); expect(report.ok)`.
 */
export { runDrills, type DrillReport, type RunDrillsOptions } from './runner.js';
export {
  drillDefaults,
  resolveDrillOptions,
  type DrillOptions,
  type ResolvedDrillOptions,
} from './options.js';
export { drillNames, type DrillName } from './drill-names.js';
export type { DrillResult, DrillStatus, Evidence } from './drill.js';
export { renderTable, type TableOptions } from './report-table.js';
export { renderJson } from './report-json.js';
export { silentProgress, streamProgress, type DrillProgress } from './progress.js';
export { parseCount } from './count.js';
