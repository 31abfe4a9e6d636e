/**
 * The default lease of a running run, which the sessions of a pool also take
 * as their bound on sitting idle inside a transaction: a process frozen (or
 * stalled) in the middle of a transaction holds its locks no longer than
 * another process would wait to take its run over.
 */

/** A running run's lease unless configured (ms). */
export const DEFAULT_LEASE_MS = 8_000;

/** STEPKEY_LEASE_MS, or the default. */
export function configuredLeaseMs(): number {
  const value = process.env.STEPKEY_LEASE_MS;
  if (value === undefined || value === '') return DEFAULT_LEASE_MS;
  const ms = Number(value);
  return Number.isFinite(ms) && ms > 0 ? ms : DEFAULT_LEASE_MS;
}
