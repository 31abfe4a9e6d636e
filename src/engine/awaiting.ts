/**
 * Awaiting a run that may execute elsewhere: its execution here is awaited;
 * otherwise its row is read every so often — a parked run is woken here when
 * it is due and this process runs its version, and a run whose process died
 * (its lease ran out) is taken over and resumed by the waiter itself — until
 * it has ended.
 */
import { readRow } from '../ledger/sql/read.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import type { KeyRef } from '../ledger/types.js';
import { claimRun } from '../lifecycle/claim.js';
import { isEnded } from '../lifecycle/states.js';
import type { Workflow, WorkflowResult } from '../workflow/define.js';
import type { Settled } from '../workflow/executor.js';
import { mismatchError, settledFromRow, unwrap } from '../workflow/outcomes.js';
import { inDatabase, type EngineCore } from './core.js';
import type { Fingerprints, RunHandle } from './options.js';

/** Waits until the run has ended, here or elsewhere, and returns how. */
export async function awaitRun(core: EngineCore, ref: KeyRef, fingerprints: Fingerprints): Promise<Settled> {
  const { sql, clock, settings } = core;
  for (let delay = 50; ; delay = Math.min(delay * 2, 1_000)) {
    const local = core.runs.running(ref);
    if (local) {
      const settled = await local;
      // Parked or stopped here: it goes on when due, wherever a sweeper runs (or here, woken).
      if ((settled.state !== 'stopped' && settled.state !== 'waiting') || (settled.state === 'stopped' && settled.reason === 'shutting_down')) return settled;
      continue;
    }
    const row = await inDatabase('reading a run', () => readRow(sql, ref));
    if (!row) throw new StepkeyError('run_not_found', `No run with key '${ref.key}' in scope '${ref.scope}'.`);
    if (row.fingerprint !== fingerprints.fingerprint && row.fingerprint !== fingerprints.legacyFingerprint()) {
      throw mismatchError(ref, { kind: row.kind, name: row.name });
    }
    if (row.status === 'waiting') {
      // Parked: it holds no lease to take over; it continues when due, here if this process runs
      // its version, or wherever a sweeper runs.
      if (row.wakeAt !== null && row.wakeAt <= Date.now() + clock.offsetMs) core.waker.wake(ref);
      await new Promise((resolve) => setTimeout(resolve, delay));
      continue;
    }
    if (row.status === 'failed' || isEnded(row.status)) return settledFromRow(row);
    const leaseLeftMs = (row.lockedUntil ?? 0) - (Date.now() + clock.offsetMs);
    if (leaseLeftMs <= 0 && !core.closing) {
      // A take in flight until its execution is tracked (shutdown waits for it).
      const taken = await core.runs.taking(async () => {
        const claim = await inDatabase('resuming a run', () =>
          claimRun(sql, clock, { ...ref, fingerprint: row.fingerprint, kind: 'run', name: row.name }, { leaseMs: settings.leaseMs, mode: 'lock' }),
        );
        return claim.state === 'owned' ? { done: core.runs.resumeClaimed(claim) } : undefined;
      });
      if (taken) return taken.done;
    }
    await new Promise((resolve) => setTimeout(resolve, Math.max(20, Math.min(delay, leaseLeftMs > 0 ? leaseLeftMs + 20 : delay))));
  }
}

/** The run's result, waiting for it wherever it executes. */
export async function runResult(core: EngineCore, ref: KeyRef, fingerprints: Fingerprints): Promise<unknown> {
  return unwrap(core.registry, ref, await awaitRun(core, ref, fingerprints));
}

/** A caller's handle on a run: its `result()` waits for the run wherever it executes. */
export function runHandle<W extends Workflow>(
  core: EngineCore,
  workflow: W,
  ref: KeyRef,
  rootKey: string | null,
  started: boolean,
  fingerprints: Fingerprints,
): RunHandle<WorkflowResult<W>, W> {
  return { workflow, scope: ref.scope, key: ref.key, rootKey, started, result: () => runResult(core, ref, fingerprints) as Promise<WorkflowResult<W>> };
}
