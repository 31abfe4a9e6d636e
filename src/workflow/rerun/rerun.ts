/**
 * Rerun from a step: a new run, under a key of the caller's choosing and
 * linked to the old one, that takes the steps before `from` from the old
 * run's record and executes the rest — with the old run's workflow version
 * and input. "Before `from`" means recorded before `from`'s record in the old
 * run: committed earlier, or, in the same commit, reached earlier.
 *
 * It refuses when a step it would execute again had a confirmed outside
 * effect — a call that completed (or whose outcome was found or given), an
 * enqueued message — unless forced, and names those steps: executed again,
 * under the new run's keys, they happen again. It refuses a run that is
 * still executing or waiting, and one whose record has expired.
 */
import type { Sql } from '../../db/connect.js';
import { type Clock, sqlNow } from '../../db/clock.js';
import { inTransaction, type TxSql } from '../../db/transaction.js';
import { StepkeyError } from '../../errors/stepkey-error.js';
import { childKey, newRootKey } from '../../keys/derive.js';
import { assertStorableText, assertValidKey } from '../../keys/validate.js';
import { claimRun } from '../../lifecycle/claim.js';
import { activeTraceContext } from '../../telemetry/tracing.js';
import { readChildren, readRow, type LedgerRow } from '../../ledger/sql/read.js';
import type { KeyRef, Lease } from '../../ledger/types.js';
import { readAttempts } from '../effects/sql/read-attempts.js';
import { runStatusOf, type RunStatus } from '../../lifecycle/states.js';
import type { WorkflowRegistry } from '../registry.js';
import { linkRerunStatement } from '../../lifecycle/rerun.js';
import { copyStepsStatement } from './sql/copy-steps.js';

export interface RerunOptions {
  /** The step to execute again from (its instance name, as inspect shows it). */
  from: string;
  /** The new run's key (same scope). */
  key: string;
  /** Execute again steps whose outside effects are confirmed (they happen again). */
  force?: boolean;
}

/** A step a rerun would execute again although its outside effect is confirmed. */
export interface ConfirmedEffect {
  step: string;
  effect: 'call' | 'enqueue';
}

export interface RerunPlan {
  workflow: string;
  version: number;
  /** The old run's status. */
  status: RunStatus;
  input: string;
  fingerprint: string;
  /** Steps taken from the old run's record. */
  taken: string[];
  /** Steps of the old record that execute again. */
  again: string[];
  confirmed: ConfirmedEffect[];
}

export async function planRerun(sql: Sql, clock: Clock, ref: KeyRef, options: RerunOptions): Promise<RerunPlan> {
  if (!options || typeof options.from !== 'string' || options.from === '') {
    throw new StepkeyError('invalid_input', 'A rerun names the step to execute again from: { from, key }.');
  }
  assertStorableText(options.from, "The rerun's 'from' step");
  assertValidKey(options.key);
  if (options.key === ref.key) throw new StepkeyError('invalid_input', 'A rerun is a new run: give it a key of its own.');
  const [row, children, attempts, [now]] = await Promise.all([
    readRow(sql, ref),
    readChildren(sql, ref),
    readAttempts(sql, ref),
    sql<{ ms: number }[]>`select (extract(epoch from ${sqlNow(sql, clock)}) * 1000)::float8 as ms`,
  ]);
  if (!row || row.kind !== 'run') {
    throw new StepkeyError('run_not_found', `No run with key '${ref.key}' in scope '${ref.scope}' (its record may have expired and been purged).`);
  }
  if (row.expiresAt !== null && row.expiresAt <= now!.ms) {
    throw new StepkeyError('run_not_found', `The record of run '${ref.key}' in scope '${ref.scope}' has expired; it cannot be rerun.`);
  }
  const { status } = runStatusOf(row);
  if (status === 'running' || status === 'waiting' || status === 'needs_review') {
    throw new StepkeyError('invalid_input', `Run '${ref.key}' is ${status}; only a run that has ended or failed can be rerun.`);
  }
  const from = children.find((child) => child.name === options.from);
  if (!from) {
    const names = children.map((child) => child.name).filter((name) => !name?.startsWith('$'));
    throw new StepkeyError(
      'invalid_input',
      `Run '${ref.key}' has no record of step '${options.from}' to rerun from (recorded: ${names.length ? names.join(', ') : 'none'}).`,
    );
  }
  const before = (child: LedgerRow) =>
    child.completedAt! < from.completedAt! ||
    (child.completedAt === from.completedAt && child.seq !== null && from.seq !== null && child.seq < from.seq);
  const taken = children.filter(before);
  const again = children.filter((child) => !before(child));
  const confirmed: ConfirmedEffect[] = [];
  for (const child of again) {
    const records = attempts.filter((attempt) => attempt.step === child.name);
    const done = records.some(
      (record) => record.outcome === 'ok' || record.resolution === 'reconciled' || record.resolution === 'resolved',
    );
    if (done && child.outcomeOk) confirmed.push({ step: child.name ?? '', effect: records[0]!.kind });
  }
  return {
    workflow: row.name ?? '',
    version: row.version ?? 0,
    status,
    input: (await sql<{ input: string }[]>`select input from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key}`)[0]?.input ?? 'null',
    fingerprint: row.fingerprint,
    taken: taken.map((child) => child.name ?? ''),
    again: again.map((child) => child.name ?? ''),
    confirmed,
  };
}

export interface StartedRerun {
  ref: KeyRef;
  plan: RerunPlan;
  /** The new run's lease, when it was started here (undefined: the key had this rerun already). */
  lease: Lease | undefined;
  /** The key had this rerun already, and this claim took it over (its process died, or it failed): its lease, to execute it. */
  takenOver?: Lease;
  rootKey: string | null;
}

/**
 * Plans the rerun, refuses it when it must, and claims the new run with the
 * steps it takes from the old one, in one transaction. `dueNow`: leave it to
 * a sweeper instead of executing it here; `registry`: the workflows of the
 * process that executes it, which must include the old run's version.
 */
export async function startRerun(
  sql: Sql,
  clock: Clock,
  ref: KeyRef,
  options: RerunOptions,
  settings: { leaseMs: number; dueNow: boolean; registry?: WorkflowRegistry },
  /** More writes that commit with the rerun's start, or with finding it started already (the operator action's audit row). */
  also?: (tx: TxSql, started: StartedRerun) => Promise<unknown>,
): Promise<StartedRerun> {
  const plan = await planRerun(sql, clock, ref, options);
  // Executed here: this process must run the old run's version.
  if (settings.registry && !settings.registry.get(plan.workflow, plan.version)) {
    throw new StepkeyError(
      'version_not_found',
      `Run '${ref.key}' ran workflow '${plan.workflow}' version ${plan.version}, which this process does not register; a rerun uses the old run's version.`,
    );
  }
  if (plan.confirmed.length > 0 && !options.force) {
    const list = plan.confirmed.map((c) => `'${c.step}' (${c.effect === 'call' ? 'a completed call' : 'an enqueued message'})`).join(', ');
    throw new StepkeyError(
      'rerun_refused',
      `Rerunning run '${ref.key}' from step '${options.from}' would execute again ${list}, whose outside effect is confirmed: ` +
        'it would happen again, under new keys. Rerun from a later step, or force it.',
      { details: { confirmed: plan.confirmed } },
    );
  }
  const newRef = { scope: ref.scope, key: options.key };
  const deadline = settings.registry?.get(plan.workflow, plan.version)?.deadline;
  const root = newRootKey(newRef.scope, newRef.key);
  return inTransaction(sql, async (tx) => {
    const claim = await claimRun(
      tx,
      clock,
      {
        ...newRef,
        fingerprint: plan.fingerprint,
        kind: 'run',
        name: plan.workflow,
        // A rerun starts over with its workflow's deadline, from its own start.
        run: { version: plan.version, input: plan.input, traceContext: activeTraceContext(), ...(deadline ? { deadline } : {}) },
        rootKey: root,
      },
      { leaseMs: settings.leaseMs },
    );
    if (claim.state !== 'owned' || claim.resumed) {
      const existing = await readRow(tx, newRef);
      if (existing?.rerunOf === ref.key && existing.rerunFrom === options.from) {
        const already: StartedRerun = {
          ref: newRef,
          plan,
          lease: undefined,
          rootKey: existing.rootKey,
          ...(claim.state === 'owned' ? { takenOver: claim.lease } : {}),
        };
        await also?.(tx, already);
        return already;
      }
      // Held by a start not committed yet (an identical rerun in flight, say): its row is not visible.
      if (!existing && claim.state === 'in_progress') {
        throw new StepkeyError('in_progress', `Key '${options.key}' in scope '${ref.scope}' is being claimed right now; try the rerun again in a moment.`);
      }
      throw new StepkeyError('mismatch', `Key '${options.key}' in scope '${ref.scope}' is taken; a rerun needs a key of its own.`, {
        details: { existing: { kind: existing?.kind ?? 'run', name: existing?.name ?? null } },
      });
    }
    const old = await readChildren(tx, ref);
    const steps = old
      .filter((child) => plan.taken.includes(child.name ?? ''))
      .map((child) => ({
        key: childKey(root, child.name ?? ''),
        name: child.name ?? '',
        outcome: child.outcome ?? '',
        ok: child.outcomeOk ?? false,
        attempts: child.attempts,
        seq: child.seq,
      }));
    await linkRerunStatement(tx, clock, claim.lease, ref.key, options.from, settings.dueNow);
    if (steps.length) await copyStepsStatement(tx, clock, claim.lease, steps);
    const started: StartedRerun = { ref: newRef, plan, lease: claim.lease, rootKey: root };
    await also?.(tx, started);
    return started;
  });
}
