/**
 * The fault plan: which faults, in which order, at which times, all drawn
 * from the seed before the run starts (the load's timing is not replayable;
 * the faults are). Every kind appears: Postgres restarted with a fast and with
 * an immediate shutdown (twice each), random backends terminated, and the
 * connection limit held. The first restart is a long outage (6–10 s: longer
 * than a step's retries of a connection failure, so runs must wait in progress
 * for a sweeper rather than fail); the others are short (0.3–3 s).
 */
import type { Prng } from './prng.js';

export type Fault =
  /** Postgres stopped (SIGINT: fast, SIGQUIT: immediate) and started again after `downMs`. */
  | { kind: 'restart-fast' | 'restart-immediate'; atMs: number; downMs: number }
  /** `count` random client backends of the app terminated with pg_terminate_backend. */
  | { kind: 'terminate'; atMs: number; count: number }
  /** Connections opened up to max_connections and held for `holdMs`. */
  | { kind: 'connection-limit'; atMs: number; holdMs: number };

export type FaultKind = Fault['kind'];

export const faultKinds: readonly FaultKind[] = ['restart-fast', 'restart-immediate', 'terminate', 'connection-limit'];

const deck: readonly FaultKind[] = [
  'restart-fast',
  'restart-fast',
  'restart-immediate',
  'restart-immediate',
  'terminate',
  'terminate',
  'terminate',
  'terminate',
  'terminate',
  'connection-limit',
  'connection-limit',
];

/** The faults of a window of `windowMs`, the first after a few seconds of load, spread over the window. */
export function planFaults(random: Prng, windowMs: number): Fault[] {
  const kinds = random.shuffle(deck);
  const slot = windowMs / kinds.length;
  let restarts = 0;
  return kinds.map((kind, i): Fault => {
    const atMs = Math.round(i * slot + random.int(Math.round(slot * 0.3), Math.round(slot * 0.7)));
    switch (kind) {
      case 'restart-fast':
      case 'restart-immediate':
        restarts += 1;
        return { kind, atMs, downMs: restarts === 1 ? random.int(6_000, 10_000) : random.int(300, 3_000) };
      case 'terminate':
        return { kind, atMs, count: random.int(2, 8) };
      case 'connection-limit':
        return { kind, atMs, holdMs: random.int(2_000, 5_000) };
    }
  });
}

export function describeFault(fault: Fault): string {
  const at = `${(fault.atMs / 1000).toFixed(1)} s`;
  switch (fault.kind) {
    case 'restart-fast':
    case 'restart-immediate':
      return `${at} ${fault.kind} (down ${fault.downMs} ms)`;
    case 'terminate':
      return `${at} terminate ${fault.count} backends`;
    case 'connection-limit':
      return `${at} connection-limit (held ${fault.holdMs} ms)`;
  }
}
