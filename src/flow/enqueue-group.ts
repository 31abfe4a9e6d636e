/**
 * Group commit of enqueues: the enqueues of one process on one queue that
 * arrive while one of its transactions is in flight wait for it, then go
 * together in the next — one transaction, one round trip, one WAL flush and
 * one hold of the queue's lock for all of them (flow/enqueue.ts, enqueueRuns).
 * A lone enqueue goes at once, as it would without a group: it waits for no
 * one, and no timer holds it back.
 *
 * Why: an enqueue that finds a slot free takes the queue's lock, and holds
 * it through its commit's WAL flush, so enqueues on one queue take its lock
 * one flush after another. Grouped, callers that would each wait their turn
 * for the lock share one turn.
 *
 * Each caller gets its own answer, as if it had enqueued alone (a failure of
 * the group's transaction sends each one alone: enqueueRuns); a request that
 * is not a valid claim fails on its own before it joins. The same key twice
 * is never in one group: the second waits for the next. A group sends at
 * most MAX_GROUP enqueues; the rest wait for the one after. Enqueues still
 * waiting when the engine begins to shut down are refused (shutting_down),
 * as a call made then would be. On Citus every enqueue goes alone and at
 * once (its dispatch takes statements of its own).
 */
import type { Sql } from '../db/connect.js';
import type { Clock } from '../db/clock.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import { assertValidClaim } from '../ledger/claim.js';
import { enqueueRun, enqueueRuns, type Enqueued, type EnqueueRequest } from './enqueue.js';
import type { FlowControl } from './flow-control.js';

/** The most enqueues in one transaction. */
export const MAX_GROUP = 64;

/** What the group needs of its process, read when a group is sent (not when its enqueues arrived). */
export interface GroupHost {
  /** The process's room and its hint of runs waiting in `queue` (see EnqueueRequest). */
  state(queue: string): Pick<EnqueueRequest, 'capacity' | 'othersWaiting'>;
  readonly closing: boolean;
}

/** An enqueue as its caller makes it: the process's room and hint are read when its group is sent. */
export type GroupedRequest = Omit<EnqueueRequest, 'capacity' | 'othersWaiting'>;

interface Waiting {
  request: GroupedRequest;
  resolve: (enqueued: Enqueued) => void;
  reject: (error: unknown) => void;
}

const idOf = (request: GroupedRequest) => `${request.ref.scope}\u001f${request.ref.key}`;

export class EnqueueGroups {
  readonly #sql: Sql;
  readonly #clock: Clock;
  readonly #flow: FlowControl;
  readonly #host: GroupHost;
  /** Per queue with a group in flight: the enqueues waiting for the next. */
  readonly #waiting = new Map<string, Waiting[]>();

  constructor(sql: Sql, clock: Clock, flow: FlowControl, host: GroupHost) {
    this.#sql = sql;
    this.#clock = clock;
    this.#flow = flow;
    this.#host = host;
  }

  /** Enqueues `request` with whatever else this process enqueues on its queue meanwhile. */
  async enqueue(request: GroupedRequest): Promise<Enqueued> {
    assertValidClaim(request.claim);
    await this.#flow.ready();
    // On Citus every enqueue goes alone and at once: nothing to wait for.
    if (!this.#flow.dispatchesInline) return enqueueRun(this.#sql, this.#clock, this.#flow, { ...request, ...this.#host.state(request.entry.queue) });
    return new Promise<Enqueued>((resolve, reject) => {
      const queue = request.entry.queue;
      const waiting = this.#waiting.get(queue);
      if (waiting) {
        waiting.push({ request, resolve, reject });
        return;
      }
      this.#waiting.set(queue, []);
      this.#send(queue, [{ request, resolve, reject }]);
    });
  }

  #send(queue: string, group: Waiting[]): void {
    let requests: EnqueueRequest[];
    try {
      const state = this.#host.state(queue);
      requests = group.map(({ request }) => ({ ...request, ...state }));
    } catch (error) {
      group.forEach((waiting) => waiting.reject(error));
      this.#next(queue);
      return;
    }
    enqueueRuns(this.#sql, this.#clock, this.#flow, requests)
      .then(
        (results) => results.forEach((result, i) => (result.status === 'fulfilled' ? group[i]!.resolve(result.value) : group[i]!.reject(result.reason))),
        (error: unknown) => group.forEach((waiting) => waiting.reject(error)),
      )
      .finally(() => this.#next(queue));
  }

  /** The next group of `queue`: the enqueues that waited, in order, one per key, at most MAX_GROUP. */
  #next(queue: string): void {
    const waiting = this.#waiting.get(queue) ?? [];
    if (waiting.length === 0 || this.#host.closing) {
      this.#waiting.delete(queue);
      if (waiting.length > 0) {
        const refused = new StepkeyError('shutting_down', 'The engine is shutting down and starts no new runs.');
        waiting.forEach((item) => item.reject(refused));
      }
      return;
    }
    const group: Waiting[] = [];
    const keys = new Set<string>();
    const rest: Waiting[] = [];
    for (const item of waiting) {
      const id = idOf(item.request);
      if (group.length < MAX_GROUP && !keys.has(id)) {
        keys.add(id);
        group.push(item);
      } else {
        rest.push(item);
      }
    }
    this.#waiting.set(queue, rest);
    this.#send(queue, group);
  }
}
