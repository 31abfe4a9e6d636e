/**
 * Resolving a run that needs review: an operator says what the at-most-once
 * call whose outcome is unknown did — its output, checked against the step's
 * schema — or that it may be called again. This changes state only: the run
 * is made due, and whichever sweeper runs its version continues it (the
 * step records the operator's output, or calls again).
 */
import type { Sql } from '../../db/connect.js';
import type { Clock } from '../../db/clock.js';
import { inTransaction, type TxSql } from '../../db/transaction.js';
import { StepkeyError } from '../../errors/stepkey-error.js';
import { assertStorableText } from '../../keys/validate.js';
import { readRow } from '../../ledger/sql/read.js';
import type { KeyRef } from '../../ledger/types.js';
import type { WorkflowRegistry } from '../registry.js';
import { runStatusOf } from '../../lifecycle/states.js';
import { encodeChecked } from '../values.js';
import { resolveReviewStatement } from '../../lifecycle/resolve.js';

export type Resolution =
  /** The call did this: the step's output (checked against its schema). */
  | { step: string; output: unknown }
  /** Call again (the callee did nothing, or doing it twice is acceptable). */
  | { step: string; retry: true };

export interface Resolved {
  step: string;
  /** The step's output as it will be recorded (JSON text), or null for a retry. */
  output: string | null;
  /** Unknown attempts this settled. */
  attempts: number;
}

export async function resolveRun(
  sql: Sql,
  clock: Clock,
  registry: WorkflowRegistry,
  ref: KeyRef,
  resolution: Resolution,
  /** More writes that commit with the resolution (the operator action's audit row). */
  also?: (tx: TxSql, resolved: Resolved) => Promise<unknown>,
): Promise<Resolved> {
  const step = resolution?.step;
  if (typeof step !== 'string' || step === '') {
    throw new StepkeyError('invalid_input', 'A resolution names the step it resolves: { step, output } or { step, retry: true }.');
  }
  assertStorableText(step, "The resolution's 'step'");
  const retry = 'retry' in resolution && resolution.retry === true;
  if (!retry && !('output' in resolution)) {
    throw new StepkeyError('invalid_input', `A resolution of step '${step}' needs its output, or retry: true.`);
  }
  const row = await readRow(sql, ref);
  if (!row || row.kind !== 'run') throw new StepkeyError('run_not_found', `No run with key '${ref.key}' in scope '${ref.scope}'.`);
  const { status } = runStatusOf(row);
  if (status !== 'needs_review') {
    throw new StepkeyError('not_in_review', `Run '${ref.key}' in scope '${ref.scope}' is ${status}, not waiting for review; nothing was resolved.`, {
      details: { status },
    });
  }
  if (row.waitStep !== step) {
    throw new StepkeyError(
      'not_in_review',
      `Run '${ref.key}' waits for review at step '${row.waitStep}', not '${step}'; nothing was resolved.`,
      { details: { step: row.waitStep } },
    );
  }
  if (row.wakeAt !== null) {
    throw new StepkeyError('not_in_review', `Run '${ref.key}' has been resolved already; a sweeper continues it.`);
  }
  let output: string | null = null;
  if (!retry) {
    const definition = row.version === null ? undefined : registry.get(row.name ?? '', row.version);
    if (!definition) {
      throw new StepkeyError(
        'version_not_found',
        `Run '${ref.key}' was started by workflow '${row.name}' version ${row.version}, which is not registered here: ` +
          "its step's schema is needed to check the output.",
      );
    }
    const base = step.replace(/\[.*\]$/, '');
    const declaration = Object.values(definition.steps).find((candidate) => candidate.name === base);
    if (!declaration) throw new StepkeyError('invalid_input', `Workflow '${definition.name}' v${definition.version} declares no step '${base}'.`);
    try {
      output = encodeChecked((resolution as { output: unknown }).output, declaration.output, `The output given for step '${step}'`);
    } catch (error) {
      throw new StepkeyError('invalid_input', error instanceof Error ? error.message : String(error), { cause: error });
    }
  }
  return inTransaction(sql, async (tx) => {
    const done = await resolveReviewStatement(tx, clock, ref, step, retry ? { resolution: 'retried' } : { resolution: 'resolved', output: output! });
    if (done.due === 0) {
      throw new StepkeyError('not_in_review', `Run '${ref.key}' changed while it was being resolved (another operator?); nothing was resolved.`);
    }
    const resolved = { step, output, attempts: done.resolved };
    await also?.(tx, resolved);
    return resolved;
  });
}
