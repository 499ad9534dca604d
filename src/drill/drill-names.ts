/** The drills, in the order they run. */
export const drillNames = [
  'replay',
  'concurrent',
  'key-reuse',
  'missing-key',
  'lost-response',
  'cross-tenant',
] as const;

export type DrillName = (typeof drillNames)[number];

export function isDrillName(value: string): value is DrillName {
  return (drillNames as readonly string[]).includes(value);
}
