/**
 * A keyed call that runs a workflow (a workflow procedure, a workflow
 * route). It does not claim the key itself: it hands its scope, key and
 * fingerprint (path or route + input) to the engine, so the request and the
 * run are one ledger row. What it answers, whatever carries it:
 *
 *   completed   the run's output — stored, so that every replay renders its
 *               answer from the same value
 *   accepted    202: the run waits (a timer, an event, a child, a queue's
 *               slot) and continues on its own; the same on a repeat
 *   errored     a stored deterministic error, replayed to every repeat
 *   cancelled   412: an operator cancelled the run (stored, final)
 *
 * `replayed` says whether the outcome was there before this call. A retry
 * after a crash resumes the run (or gets 409 while it still runs) instead of
 * starting another. Refusals are thrown: 409 in progress, 422 mismatch, and
 * failures through refusalOf (503 + Retry-After while Postgres is
 * unavailable, 409 + Retry-After when the run continues in another process).
 */
import { isStepkeyError } from '../errors/stepkey-error.js';
import type { StoredError } from '../ledger/outcome.js';
import { instrument } from '../telemetry/instrumentation.js';
import type { Engine } from '../engine/engine.js';
import type { Workflow } from '../workflow/define.js';
import type { RunWaitView } from '../lifecycle/wait.js';
import type { RequestFingerprints } from './fingerprints.js';
import { internalFailure, type ErrorReport } from './internal-failure.js';
import type { KeyedRequest } from './keyed-request.js';
import { answerQueued } from './queued-run.js';
import { inProgress, mismatch, type RequestNoun } from './refusal.js';
import { refusalOf } from './service-failure.js';

export type RunAnswer =
  | { kind: 'completed'; output: unknown; replayed: boolean }
  | { kind: 'accepted'; wait: RunWaitView; replayed: boolean }
  | { kind: 'errored'; error: StoredError; replayed: boolean }
  | { kind: 'cancelled'; reason: string | undefined; replayed: boolean };

export interface RunCall {
  engine: Engine;
  workflow: Workflow;
  request: KeyedRequest;
  /** The workflow's input (validated by the engine before anything is claimed). */
  input: unknown;
  fingerprints: RequestFingerprints;
  /** The procedure's path or the route's name. */
  name: string;
  noun: RequestNoun;
  report: ErrorReport;
  /** Put the run on this queue (engine.enqueue) instead of starting it at once. */
  queue?: { name: string; priority: number | undefined };
}

export async function answerRun(call: RunCall): Promise<RunAnswer> {
  const answer = call.queue ? await answerQueued({ ...call, queue: call.queue }) : await attempted(call);
  if (answer.replayed && answer.kind !== 'accepted') instrument.replayed('workflow');
  return answer;
}

async function attempted(call: RunCall): Promise<RunAnswer> {
  let attempt;
  try {
    attempt = await call.engine.attempt(call.workflow, call.request, call.input as never, call.fingerprints);
  } catch (error) {
    // A retryable error is not stored: a failed run resumes, a stopped one continues elsewhere. The retry goes on with it.
    // A failed run answers a fixed message and an error id; the log line with that id has the step's error.
    throw isStepkeyError(error) ? refusalOf(error, call.report) : internalFailure(error, call.report);
  }
  switch (attempt.state) {
    case 'completed':
      return { kind: 'completed', output: attempt.output, replayed: attempt.replayed };
    case 'errored':
      return { kind: 'errored', error: attempt.error, replayed: attempt.replayed };
    case 'cancelled':
    case 'deadline_exceeded':
      // Cancelled under this very call (an operator stopped the run it executed): its first answer. A run
      // past its deadline is answered as a cancelled one, its reason saying so.
      return { kind: 'cancelled', reason: attempt.reason.message, replayed: attempt.replayed };
    case 'waiting':
      return { kind: 'accepted', wait: attempt.wait, replayed: attempt.replayed };
    case 'running':
    case 'needs_review':
      // One answer on the wire for both: "in progress", ask again after Retry-After.
      throw inProgress(attempt.retryAfterMs);
    case 'mismatch':
      throw mismatch(attempt.existing, { kind: 'run', name: call.workflow.name }, call.noun);
  }
}

