import type { Drill } from '../drill.js';
import type { DrillName } from '../drill-names.js';
import { concurrentDrill } from './concurrent.js';
import { crossTenantDrill } from './cross-tenant.js';
import { keyReuseDrill } from './key-reuse.js';
import { lostResponseDrill } from './lost-response.js';
import { missingKeyDrill } from './missing-key.js';
import { replayDrill } from './replay.js';

/** Every drill by name. */
export const drills: Record<DrillName, Drill> = {
  replay: replayDrill,
  concurrent: concurrentDrill,
  'key-reuse': keyReuseDrill,
  'missing-key': missingKeyDrill,
  'lost-response': lostResponseDrill,
  'cross-tenant': crossTenantDrill,
};
