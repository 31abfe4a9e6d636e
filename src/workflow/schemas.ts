/** Schemas that survive the JSON round trip of stored values. */
import { z } from 'zod';

/**
 * A Date that is stored as an ISO string and comes back as a Date. Use it
 * instead of `z.date()` in step outputs, run outputs and inputs.
 */
export function dateField() {
  return z.union([z.date(), z.iso.datetime({ offset: true }).transform((text) => new Date(text))]);
}
