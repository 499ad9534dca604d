/**
 * `idem/cells`: one idem per group of tenants, each group (a cell) on its own PostgreSQL. See
 * docs/operations/scaling-out.md.
 */
export { createCells, type Cells, type Cell, type CellsOptions, type TenantCell } from './cells.js';
