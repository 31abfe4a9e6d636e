/**
 * An idempotent HTTP handler: the core's claim-and-commit (idempotency/
 * keyed-call.ts) around a handler that returns `{ status, headers, body }`.
 *
 *   2xx, 3xx      committed with the handler's writes (the transaction it is
 *                 handed) and the stored answer, in one transaction
 *   a stored 4xx  (not 401/403/408/409/429) stored alone: the handler's writes
 *                 roll back, as for a thrown client error
 *   any other     (5xx, 401/403/408/409/429) sent as the handler answered it;
 *                 its writes roll back, nothing is stored, the retry runs
 *   thrown        an error marked non-retryable is stored as a problem answer
 *                 (its code's status); anything else rolls back and answers
 *                 500 with an error id — never its message, SQL or driver text
 *
 * Replays are the stored answer byte for byte, with Idempotent-Replayed: true
 * (and only replays carry it).
 */
import { faultPoint } from '../faults/fault-points.js';
import { fingerprintsOrBadRequest } from '../idempotency/fingerprints.js';
import { IDEMPOTENCY_KEY_HEADER } from '../idempotency/header.js';
import { errorReport, internalFailure } from '../idempotency/internal-failure.js';
import { runKeyed } from '../idempotency/keyed-call.js';
import { readKeyedRequest, type KeyedRequest } from '../idempotency/keyed-request.js';
import type { IdempotencyContext, IdempotencyContextFor, KeyedCallOptions } from '../idempotency/options.js';
import { isRefusal } from '../idempotency/refusal.js';
import { isStoredStatus } from '../idempotency/store-policy.js';
import { isNonRetryable, serializeError } from '../ledger/outcome.js';
import type { OutcomeToStore } from '../ledger/types.js';
import { decodeStored, encodeStored, replayed, toWire, type HandlerAnswer, type WireAnswer } from './answer.js';
import { routeName, type Exchange, type HttpIdempotencySetup, type RouteOptions } from './exchange.js';
import { refusalAnswer, storedErrorAnswer } from './problem.js';
import { fingerprintInput, type RequestBody } from './request-body.js';

export interface HandlerOptions extends KeyedCallOptions, RouteOptions {}

/**
 * What a handler is handed besides the request: `HandlerCall` for a route
 * with the default options, `HandlerCall<IdempotencyContextFor<O>>` for one
 * that is optional or fails open.
 */
export interface HandlerCall<Idempotency = IdempotencyContext> {
  body: RequestBody;
  /** The key, the scope and the claim's transaction (sql, db): writes there commit with a 2xx/3xx answer. */
  idempotency: Idempotency;
}

/** The call a route with these options hands its handler. */
export type HandlerCallFor<O extends HandlerOptions> = HandlerCall<IdempotencyContextFor<O>>;

/** An answer that is not committed: a 4xx (stored alone, or not at all) or one never stored. */
class Uncommitted extends Error {
  constructor(readonly answer: WireAnswer) {
    super(`answered ${answer.status}`);
  }
}

function storeError(error: unknown): OutcomeToStore | undefined {
  if (error instanceof Uncommitted) {
    return isStoredStatus(error.answer.status) ? { ok: false, body: encodeStored(error.answer), code: error.answer.status } : undefined;
  }
  if (!isNonRetryable(error)) return undefined;
  const answer = storedErrorAnswer(serializeError(error));
  return { ok: false, body: encodeStored(answer), code: answer.status };
}

/** Answers a request with a keyed method; the handler's own answer, a stored one, or stepkey's. */
export async function answerKeyed<O extends HandlerOptions>(
  setup: HttpIdempotencySetup,
  options: O,
  exchange: Exchange,
  handler: (call: HandlerCallFor<O>) => Promise<HandlerAnswer> | HandlerAnswer,
): Promise<WireAnswer> {
  const route = routeName(options, exchange);
  let request: KeyedRequest | undefined;
  try {
    request = readKeyedRequest({ headerValues: exchange.header(IDEMPOTENCY_KEY_HEADER), scope: () => exchange.scope(), mode: options.mode ?? 'required' });
    const body = await exchange.body();
    const plain = async (idempotency: HandlerCallFor<O>['idempotency']) => toWire(await handler({ body, idempotency }), route);
    if (!request) return await plain(undefined as HandlerCallFor<O>['idempotency']);
    const covered = fingerprintInput(exchange.method, body, options.exclude);
    const fingerprints = fingerprintsOrBadRequest(route, { raw: covered.input, validated: covered.input }, covered.exclude);
    const call = { ledger: setup.ledger, request, fingerprints, name: route, noun: 'route', options, report: errorReport(setup, 'http', route, request) } as const;
    const outcome = await runKeyed(
      call,
      async (idempotency) => {
        const answer = toWire(await handler({ body, idempotency: idempotency as HandlerCallFor<O>['idempotency'] }), route);
        if (answer.status >= 400) throw new Uncommitted(answer);
        return answer;
      },
      { serialize: encodeStored, code: (answer) => answer.status, storeError },
    );
    switch (outcome.state) {
      case 'bypassed':
        return await plain({ ...request, bypassed: true } as HandlerCallFor<O>['idempotency']);
      case 'executed':
        faultPoint('http.before-response', route);
        if (outcome.ok) return outcome.value;
        return outcome.error instanceof Uncommitted ? outcome.error.answer : decodeStored(outcome.outcome.body, outcome.outcome.code);
      case 'replay':
        return replayed(decodeStored(outcome.outcome.body, outcome.outcome.code));
    }
  } catch (error) {
    if (error instanceof Uncommitted) return error.answer;
    if (isRefusal(error)) return refusalAnswer(error);
    return refusalAnswer(internalFailure(error, errorReport(setup, 'http', route, request)));
  }
}
