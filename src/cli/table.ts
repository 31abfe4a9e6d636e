/**
 * Human tables: left-aligned columns separated by two spaces, with a header
 * row. Cells are single lines; a column may be capped to a width, its cells
 * cut with …. No colours, so output pipes and diffs cleanly.
 */
import { truncate } from './format.js';

export interface Column {
  header: string;
  /** Cells longer than this are cut (default: no cap). */
  max?: number;
  align?: 'left' | 'right';
}

export function renderTable(columns: readonly Column[], rows: readonly (readonly string[])[]): string {
  const cells = rows.map((row) =>
    columns.map((column, index) => {
      const cell = (row[index] ?? '').replace(/\s+/g, ' ');
      return column.max === undefined ? cell : truncate(cell, column.max);
    }),
  );
  const widths = columns.map((column, index) =>
    Math.max(column.header.length, ...cells.map((row) => row[index]!.length)),
  );
  const line = (row: readonly string[]) =>
    row
      .map((cell, index) =>
        columns[index]!.align === 'right' ? cell.padStart(widths[index]!) : cell.padEnd(widths[index]!),
      )
      .join('  ')
      .trimEnd();
  return [line(columns.map((column) => column.header)), ...cells.map(line)].join('\n');
}
