/**
 * The `call` step: work outside any transaction (an HTTP call, say), with the
 * step's derived key for the callee to dedupe on — and an effect record, so
 * that the ledger knows how many attempts may have reached the callee and how
 * each ended.
 *
 *   settle     an earlier attempt whose outcome is unknown is settled first:
 *              an operator's resolution, the step's reconcile (ask the callee
 *              by the key: found is the step's output, absent means call
 *              again), or — for an atMostOnce step — the run stops as
 *              needs_review
 *   start      the attempt's row, fenced by the run's lease, commits with
 *              whatever waits to commit (the run's start, the last tx step,
 *              the last attempt's end), or alone
 *   call       fn({ key, signal, attempt, previous })
 *   end        with the step's row (success, stored error: one statement), or
 *              with the next commit (a failure to retry, a cut attempt)
 *
 * An end is written only under the lease that started the attempt: a holder
 * whose lease was taken over writes nothing, so its attempt stays unknown.
 */
import { faultPoint } from '../../faults/fault-points.js';
import { serializeError, toJsonText } from '../../ledger/outcome.js';
import { commitDeferred, commitWaiting } from '../commit.js';
import { RunStopped, StepAttemptsExhausted, classifyError, isUnavailable } from '../errors.js';
import type { CallContext } from '../handles.js';
import { backoffDelay } from '../retry.js';
import type { StepRow } from '../sql/step-rows.js';
import { enterStep, replay, runStepBody, sleep, stepTimeout, type StepTarget } from '../steps.js';
import { encodeChecked } from '../values.js';
import { parkStatement } from '../../lifecycle/park.js';
import { nextAttemptNumber, previousAttempts, unresolvedUnknowns, type AttemptRecord, type AttemptWrite } from './attempts.js';
import { wasCut } from './cut.js';
import { inSpan } from '../../telemetry/tracing.js';
import { stepSpan } from '../../telemetry/spans.js';
import { commitForAttempt } from '../step-limits.js';

type Tried = { ok: true; value: unknown; durationMs: number } | { ok: false; error: unknown; cut: boolean; durationMs: number };

export function runCallStep(target: StepTarget, fn: (context: CallContext) => Promise<unknown>): Promise<unknown> {
  return enterStep(target, ({ instance, key }) => executeCall(target, instance, key, fn));
}

async function executeCall(target: StepTarget, instance: string, key: string, fn: (context: CallContext) => Promise<unknown>) {
  const { state, declaration } = target;
  const { leaseMs } = state.deps;
  const what = `The output of step '${instance}'`;
  const records = (): AttemptRecord[] => state.record.attempts.get(instance) ?? [];
  // What waits to commit (the last tx step, the run's start) commits with the first attempt's start.
  state.control.throwIfStopped();
  faultPoint('engine.before-step', declaration.name);

  const finish = async (row: StepRow, attempts: AttemptWrite[]) => {
    await commitWaiting(state, { rows: [row], attempts });
    faultPoint('engine.after-step-commit', declaration.name);
    state.control.progress(leaseMs);
    return replay(target, instance, state.record.finished.get(instance)!);
  };
  const stepRow = (ok: boolean, body: string): StepRow => ({ key, name: instance, ok, body, attempts: records().length || 1 });
  const callSpan = (number: number) => () => stepSpan({ scope: state.lease.scope, run: state.lease.key, step: instance, kind: 'call', key, attempt: number });

  for (let tries = 1; ; tries += 1) {
    // Settle what an earlier attempt may have done before calling again.
    const resolved = records().find((record) => record.resolution === 'resolved' && record.resolvedOutput !== null);
    if (resolved) return finish(stepRow(true, resolved.resolvedOutput!), []);
    const unknown = unresolvedUnknowns(records());
    let failure: Tried | undefined;
    if (unknown.length > 0) {
      state.deps.log.warn(
        { event: 'call.unknown_outcome', scope: state.lease.scope, run: state.lease.key, step: instance, attempts: unknown.map((a) => a.attempt) },
        `step '${instance}': an earlier attempt's outcome is unknown (it may have reached the callee)`,
      );
      if (declaration.reconcile) {
        // Not while holding the last tx step's transaction open.
        await commitDeferred(state);
        // Every unknown attempt here started under a lease that has ended (a takeover comes only once
        // a lease has expired; a park, a failure or a shutdown end it) or under this one, whose call
        // this process itself cut short: no holder is still calling.
        const looked = await attempt(state, declaration.timeoutMs, instance, tries, (signal) =>
          declaration.reconcile!({ key, previous: previousAttempts(records()), scope: state.lease.scope, signal }),
        );
        if (looked.ok && looked.value !== undefined) {
          const body = encodeChecked(looked.value, declaration.output, `What reconcile found for step '${instance}'`);
          state.deps.log.info({ event: 'call.reconciled', scope: state.lease.scope, run: state.lease.key, step: instance }, `step '${instance}': reconcile found the earlier attempt's outcome`);
          return finish(stepRow(true, body), unknown.map((a) => resolve(a, 'reconciled', body)));
        }
        if (looked.ok) state.buffer.pendingAttempts.push(...unknown.map((a) => resolve(a, 'absent', null)));
        else failure = looked;
      } else if (declaration.atMostOnce) {
        const wait = { kind: 'review' as const, step: instance, for: null, untilMs: null };
        await commitWaiting(state, { statements: (q) => [parkStatement(q, state.deps.clock, state.lease, wait)] });
        state.deps.log.warn(
          { event: 'call.needs_review', scope: state.lease.scope, run: state.lease.key, step: instance },
          `run '${state.lease.key}' needs review: step '${instance}' is at most once and an attempt's outcome is unknown`,
        );
        faultPoint('engine.after-park', declaration.name);
        throw state.control.park(wait);
      }
    }

    if (!failure) {
      const number = nextAttemptNumber(records());
      // With the step's limit taken (or the run parked instead: src/flow/limit-acquire.ts).
      await commitForAttempt(target, instance, { attempts: [{ write: 'start', step: instance, attempt: number, kind: 'call' }] });
      faultPoint('engine.before-call', declaration.name);
      const previous = previousAttempts(records().filter((record) => record.attempt !== number));
      const tried = await inSpan(callSpan(number), () => attempt(state, declaration.timeoutMs, instance, number, (signal) => fn({ key, signal, attempt: number, previous })), callEnding);
      if (tried.ok) {
        faultPoint('engine.in-call', declaration.name);
        let body: string;
        try {
          body = encodeChecked(tried.value, declaration.output, what);
        } catch (error) {
          // The callee answered, and its answer cannot be recorded: what it did stays to be settled.
          state.buffer.pendingAttempts.push(end(instance, number, 'unknown', error, tried.durationMs));
          throw error;
        }
        return finish(stepRow(true, body), [end(instance, number, 'ok', undefined, tried.durationMs)]);
      }
      const ending = end(instance, number, tried.cut ? 'unknown' : 'failed', tried.error, tried.durationMs);
      const kind = classifyError(tried.error);
      if (kind === 'stored' && !tried.cut) {
        return finish(stepRow(false, toJsonText(serializeError(tried.error), 'error')), [ending]);
      }
      // Recorded with the next commit: the next attempt's start, the run's failure or its park.
      state.buffer.pendingAttempts.push(ending);
      state.record.applyAttempts([ending], Date.now(), state.lease.token);
      failure = tried;
    }
    if (failure.ok) continue;
    const { error } = failure;
    if (error instanceof RunStopped || classifyError(error) === 'bug') throw error;
    if (classifyError(error) === 'stored') {
      return finish(stepRow(false, toJsonText(serializeError(error), 'error')), []);
    }
    if (tries >= declaration.retry.attempts) throw new StepAttemptsExhausted(instance, tries, error);
    const delay = backoffDelay(declaration.retry, tries);
    state.deps.log.info(
      { event: 'step.retry', scope: state.lease.scope, run: state.lease.key, step: instance, try: tries, delayMs: delay, error: serializeError(error) },
      `step '${instance}' failed (try ${tries} of ${declaration.retry.attempts}); retrying in ${delay} ms`,
    );
    if (!isUnavailable(error)) state.control.progress(delay + leaseMs);
    await sleep(delay, state.control.signal);
    state.control.throwIfStopped();
  }
}

/** One try of `work` under the step's timeout and the run's signal. */
async function attempt(
  state: StepTarget['state'],
  timeoutMs: number,
  instance: string,
  number: number,
  work: (signal: AbortSignal) => Promise<unknown>,
): Promise<Tried> {
  const controller = new AbortController();
  const onStop = () => controller.abort(state.control.signal.reason);
  state.control.signal.addEventListener('abort', onStop, { once: true });
  // Built only when it happens: an Error captures its stack, which is not free on every attempt.
  const timer = setTimeout(() => controller.abort(stepTimeout(instance, timeoutMs, number)), timeoutMs);
  const began = performance.now();
  try {
    const aborted = new Promise<never>((_, reject) => {
      controller.signal.addEventListener('abort', () => reject(controller.signal.reason), { once: true });
    });
    aborted.catch(() => {});
    state.control.progress(timeoutMs + state.deps.leaseMs);
    const value = await Promise.race([runStepBody(state, () => work(controller.signal)), aborted]);
    return { ok: true, value, durationMs: performance.now() - began };
  } catch (error) {
    return { ok: false, error, cut: wasCut(error, controller.signal), durationMs: performance.now() - began };
  } finally {
    clearTimeout(timer);
    state.control.signal.removeEventListener('abort', onStop);
  }
}

/** A call attempt's span: completed, or its error (retried, stored or cut: the step's record says which). */
function callEnding(tried: Tried) {
  return tried.ok ? { attributes: { 'stepkey.outcome': 'completed' } } : { attributes: { 'stepkey.outcome': tried.cut ? 'cut' : 'failed' }, error: tried.error };
}

function end(step: string, number: number, outcome: 'ok' | 'failed' | 'unknown', error: unknown, ms: number): AttemptWrite {
  return {
    write: 'end',
    step,
    attempt: number,
    outcome,
    error: outcome === 'ok' ? null : toJsonText(serializeError(error), 'error'),
    durationMs: Math.max(0, Math.round(ms)),
  };
}

function resolve(record: AttemptRecord, resolution: 'reconciled' | 'absent', output: string | null): AttemptWrite {
  return { write: 'resolve', step: record.step, attempt: record.attempt, resolution, output };
}
