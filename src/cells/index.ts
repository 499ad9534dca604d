/**
 * `idem/cells`: one idem per group of tenants, each group (a cell) on its own PostgreSQL. See
 * docs/deployment.md.
 */
export { Cells, createCells, type Cell, type CellsOptions, type TenantCell } from './cells.js';
