/**
 * A workflow route: a keyed request that starts a run under the caller's key
 * — the request and its run are one ledger row (idempotency/run-answer.ts,
 * shared with tRPC's workflow procedures) — and answers its result:
 *
 *   completed   `respond(run)` (default: 200 with the run's output as JSON),
 *               rendered from the run's stored output on every replay
 *   waiting     202 { key, status: 'waiting', waitingFor, step, … }
 *   errored     the stored deterministic error as a problem answer, its
 *               code's status (400 unless the code names another)
 *   cancelled   412
 *
 * Replays carry Idempotent-Replayed: true. The body is the workflow's input
 * (JSON) unless `input` says how to make it; the fingerprint covers the
 * method, the route and the body as sent.
 */
import type { z } from 'zod';
import { fingerprintsOrBadRequest } from '../idempotency/fingerprints.js';
import { IDEMPOTENCY_KEY_HEADER } from '../idempotency/header.js';
import { errorReport, internalFailure } from '../idempotency/internal-failure.js';
import { readKeyedRequest, type KeyedRequest } from '../idempotency/keyed-request.js';
import { cancelled, isRefusal, Refusal } from '../idempotency/refusal.js';
import { answerRun, type RunAnswer } from '../idempotency/run-answer.js';
import { waitingAnswer } from '../idempotency/waiting-answer.js';
import type { Workflow, WorkflowResult } from '../workflow/define.js';
import type { Engine } from '../engine/engine.js';
import { replayed, toWire, type HandlerAnswer, type WireAnswer } from './answer.js';
import { routeName, type Exchange, type HttpIdempotencySetup, type RouteOptions } from './exchange.js';
import { refusalAnswer, storedErrorAnswer } from './problem.js';
import { fingerprintInput, type RequestBody } from './request-body.js';

type InputOf<W> = W extends Workflow<infer I> ? z.input<I> : never;

/** A completed run, as `respond` renders it. */
export interface CompletedRun<Output> {
  output: Output;
  /** true when this answer replays a run that had already completed. */
  replayed: boolean;
  key: string;
  scope: string;
}

export interface WorkflowRouteOptions<Req, W extends Workflow> extends RouteOptions {
  /** The workflow's input from the request (default: the JSON body). */
  input?: (body: RequestBody, request: Req) => InputOf<W>;
  /** The answer for a completed run (default: 200, the output as JSON); called on every replay too. */
  respond?: (run: CompletedRun<WorkflowResult<W>>) => HandlerAnswer;
  /** Volatile JSON fields of the body left out of the fingerprint. */
  exclude?: string[];
}

function jsonInput(body: RequestBody): unknown {
  if (body.json !== undefined) return body.json;
  throw new Refusal(415, 'A workflow route takes its input as a JSON body (Content-Type: application/json).');
}

function render<Req, W extends Workflow>(answer: RunAnswer, request: KeyedRequest, options: WorkflowRouteOptions<Req, W>, route: string): WireAnswer {
  switch (answer.kind) {
    case 'completed': {
      const run = { output: answer.output as WorkflowResult<W>, replayed: answer.replayed, ...request };
      return toWire(options.respond ? options.respond(run) : { status: 200, body: answer.output ?? null }, route);
    }
    case 'accepted':
      return toWire({ status: 202, body: waitingAnswer(request.key, answer.wait) }, route);
    case 'errored':
      return storedErrorAnswer(answer.error);
    case 'cancelled':
      return refusalAnswer(cancelled(answer.reason));
  }
}

/** Answers a request with a keyed method by the workflow's run under its key. */
export async function answerWorkflow<Req, W extends Workflow>(
  setup: HttpIdempotencySetup & { engine: Engine },
  workflow: W,
  options: WorkflowRouteOptions<Req, W>,
  exchange: Exchange,
  native: () => Req | Promise<Req>,
): Promise<WireAnswer> {
  const route = routeName(options, exchange);
  let request: KeyedRequest | undefined;
  try {
    request = readKeyedRequest({ headerValues: exchange.header(IDEMPOTENCY_KEY_HEADER), scope: () => exchange.scope(), mode: 'required' })!;
    const body = await exchange.body();
    const input = options.input ? options.input(body, await native()) : jsonInput(body);
    const covered = fingerprintInput(exchange.method, body, options.exclude);
    const fingerprints = fingerprintsOrBadRequest(route, { raw: covered.input, validated: covered.input }, covered.exclude);
    const answer = await answerRun({
      engine: setup.engine,
      workflow,
      request,
      input,
      fingerprints,
      name: route,
      noun: 'route',
      report: errorReport(setup, 'http', route, request),
    });
    const wire = render(answer, request, options, route);
    return answer.replayed ? replayed(wire) : wire;
  } catch (error) {
    if (isRefusal(error)) return refusalAnswer(error);
    return refusalAnswer(internalFailure(error, errorReport(setup, 'http', route, request)));
  }
}
