/**
 * Claiming a run: its input checked and fingerprinted, its key claimed
 * (lifecycle/claim.ts), and what the claim found turned into what the caller
 * does next — execute it here (a new run, or one this claim took over),
 * answer with its stored outcome or its wait, tell it "running", or
 * refuse a key first used with another input.
 *
 * Folded (engine.attempt, engine.run), the claim stays uncommitted in the
 * transaction the run's first write commits — one commit fewer per run; a
 * duplicate meets the claim's advisory lock and is told "in progress"
 * meanwhile — and a key whose committed row answers the call is answered
 * first, by one statement outside any transaction. Unfolded (engine.start),
 * the claim commits before the caller is answered.
 */
import { Transaction } from '../db/transaction.js';
import { translateDatabaseError } from '../errors/pg-errors.js';
import { isStepkeyError, shuttingDownError, StepkeyError } from '../errors/stepkey-error.js';
import { newRootKey, storedRootKey } from '../keys/derive.js';
import { legacyPurposeFingerprint, purposeFingerprint } from '../keys/fingerprint.js';
import { probeKey } from '../ledger/claim.js';
import { toJsonText } from '../ledger/outcome.js';
import type { ClaimRequest, ClaimResult, KeyRef, LedgerKind } from '../ledger/types.js';
import { claimRun, claimVacantRun } from '../lifecycle/claim.js';
import { resolveDeadline } from '../lifecycle/deadline.js';
import { instrument } from '../telemetry/instrumentation.js';
import { activeTraceContext } from '../telemetry/tracing.js';
import { takesLimits, type Workflow } from '../workflow/define.js';
import type { Settled } from '../workflow/executor.js';
import { parkedWait, replayFields, settledFromRow } from '../workflow/outcomes.js';
import { summarise } from '../workflow/values.js';
import { inDatabase, type EngineCore } from './core.js';
import { assertValidRef, type Fingerprints, type RunOptions } from './options.js';

export type Begun =
  | { kind: 'executing'; done: Promise<Settled>; resumed: boolean; fingerprints: Fingerprints; rootKey: string | null }
  | { kind: 'settled'; settled: Settled; fingerprints: Fingerprints; rootKey: string | null }
  /** Executing elsewhere: another call holds the run's lease (or its start, uncommitted). */
  | { kind: 'running'; retryAfterMs: number; fingerprints: Fingerprints; rootKey: string | null }
  | { kind: 'mismatch'; existing: { kind: LedgerKind; name: string | null } };

/** A caller's claim of a run and its start here, a take in flight until then (LocalRuns.taking: shutdown waits for it). */
export function beginRun(core: EngineCore, workflow: Workflow, ref: KeyRef, input: unknown, options: RunOptions, fold: boolean): Promise<Begun> {
  if (core.closing) return Promise.reject(shuttingDownError());
  return core.runs.taking(() => begin(core, workflow, ref, input, options, fold));
}

async function begin(core: EngineCore, workflow: Workflow, ref: KeyRef, input: unknown, options: RunOptions, fold: boolean): Promise<Begun> {
  assertValidRef(ref);
  const definition = core.registry.require(workflow);
  const parsed = definition.input.safeParse(input);
  if (!parsed.success) {
    throw new StepkeyError('invalid_input', `The input of workflow '${definition.name}' is invalid: ${summarise(parsed.error)}.`, {
      cause: parsed.error,
    });
  }
  const deadline = resolveDeadline(options.deadline, `Starting workflow '${definition.name}'`) ?? definition.deadline;
  const inputText = toJsonText(parsed.data, `input of workflow '${definition.name}'`);
  const fingerprints = fingerprintsOf(definition.name, input, parsed.data, options);
  const root = newRootKey(ref.scope, ref.key);
  const action = `starting workflow '${definition.name}'`;
  const request: ClaimRequest = {
    ...ref,
    ...fingerprints,
    kind: 'run',
    name: definition.name,
    // A run that takes no limit and is not enqueued never holds a slot: its transitions skip giving them back.
    run: { version: definition.version, input: inputText, traceContext: activeTraceContext(), flow: takesLimits(definition), ...(deadline ? { deadline } : {}) },
    rootKey: root,
  };
  const { sql, clock, settings } = core;
  const known = fold ? await inDatabase(action, () => probeKey(sql, clock, request)) : undefined;
  const opening = fold && !known ? await inDatabase(action, () => Transaction.begin(sql)) : undefined;
  let claim;
  try {
    claim =
      known ??
      (opening
        ? await claimVacantRun(opening.sql, clock, request, { leaseMs: settings.leaseMs })
        : await claimRun(sql, clock, request, { leaseMs: settings.leaseMs }));
  } catch (error) {
    opening?.abandon();
    throw translateDatabaseError(error, action);
  }
  if (opening && core.closing && (claim.state === 'owned' || (claim.state === 'waiting' && claim.resumed))) {
    // The engine began to shut down while the claim was in flight: it executes nothing more. The
    // claim (a start, a takeover, a failed run put back in line), still uncommitted, is undone —
    // nothing of the call is written.
    opening.abandon();
    throw shuttingDownError();
  }
  if (claim.state === 'owned' && !claim.resumed) {
    instrument.runStarted(definition);
    const lease = claim.lease;
    // Committed (engine.start) as the shutdown began: its lease is given up at once, for another process.
    const done = core.runs.trackTaken(lease, () =>
      core.runs.execute(lease, definition, parsed.data, {
        rootKey: root,
        finished: new Map(),
        opening,
        storesTrace: request.run?.traceContext === null,
        deadlineAtMs: claim.deadlineAtMs ?? null,
      }),
    );
    return { kind: 'executing', done, resumed: false, fingerprints, rootKey: root };
  }
  if (claim.state === 'owned') {
    if (opening) await inDatabase(action, () => opening.commit());
    const done = core.runs.resumeClaimed(claim);
    return { kind: 'executing', done, resumed: true, fingerprints, rootKey: storedRootKey(ref.scope, ref.key, claim.rootKey) };
  }
  if (claim.state === 'waiting' && claim.resumed) {
    // A failed run on a queue, resumed by this claim and parked for a slot (src/flow).
    if (opening) await inDatabase(action, () => opening.commit());
    core.dispatcher.afterRequeue(claim);
  } else opening?.abandon();
  switch (claim.state) {
    case 'replay':
      return {
        kind: 'settled',
        settled: settledFromRow(replayFields(definition.name, claim.outcome, claim.version)),
        fingerprints,
        rootKey: storedRootKey(ref.scope, ref.key, claim.rootKey),
      };
    case 'in_progress':
      return { kind: 'running', retryAfterMs: claim.retryAfterMs, fingerprints, rootKey: foundRootKey(ref, claim) };
    case 'waiting':
      return {
        kind: 'settled',
        settled: { state: 'waiting', wait: parkedWait(claim.wait) },
        fingerprints,
        rootKey: storedRootKey(ref.scope, ref.key, claim.rootKey),
      };
    case 'mismatch':
      return { kind: 'mismatch', existing: claim.existing };
  }
}

/**
 * The run's fingerprint (v2: the workflow's name and the input as given)
 * and, lazily, its v1 form over the validated input — or the caller's own.
 */
export function fingerprintsOf(name: string, raw: unknown, validated: unknown, options: RunOptions): Fingerprints {
  if (options.fingerprint !== undefined) {
    return { fingerprint: options.fingerprint, legacyFingerprint: options.legacyFingerprint ?? (() => options.fingerprint!) };
  }
  const exclude = options.exclude ? { exclude: options.exclude } : {};
  try {
    return {
      fingerprint: purposeFingerprint(name, raw, exclude),
      legacyFingerprint: () => legacyPurposeFingerprint(name, validated, exclude),
    };
  } catch (error) {
    // A bad option (exclude) is the caller's, not the input's.
    if (isStepkeyError(error) && error.code === 'invalid_options') throw error;
    throw new StepkeyError('invalid_input', `The input of workflow '${name}' cannot be fingerprinted: ${(error as Error).message}`, {
      cause: error,
    });
  }
}

/** The root of a run a claim found already there (unknown, null, while another call's start of it is uncommitted). */
export function foundRootKey(ref: KeyRef, claim: Exclude<ClaimResult, { state: 'mismatch' }>): string | null {
  if (claim.state === 'in_progress' && claim.version === undefined) return null;
  return storedRootKey(ref.scope, ref.key, claim.rootKey);
}
