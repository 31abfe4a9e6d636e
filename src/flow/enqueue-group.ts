/**
 * Group commit of enqueues: the enqueues of one process on one queue that
 * arrive while one of its transactions is in flight wait for it, then go
 * together in the next — one transaction, one round trip, one WAL flush and
 * one hold of the queue's lock for all of them (flow/enqueue.ts, enqueueRuns).
 * A lone enqueue goes at once, as it would without a group: it waits for no
 * one, and no timer holds it back.
 *
 * Why: an enqueue that finds a slot free (and saw no backlog) takes the queue's lock, and holds
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
import { shuttingDownError } from '../errors/stepkey-error.js';
import { assertValidClaim } from '../ledger/claim.js';
import { enqueueRun, enqueueRuns, type Enqueued, type EnqueueRequest } from './enqueue.js';
import type { FlowControl } from './flow-control.js';

/** The most enqueues in one transaction. */
export const MAX_GROUP = 64;

/**
 * The room a group's dispatch may fill, read when the group is sent: held
 * from then until each of its callers has executed what it was answered
 * (`taken`, once per caller; the group calls it for a caller it answers
 * with an error), so that another dispatch meanwhile does not count it free.
 */
export interface GroupRoom extends Pick<EnqueueRequest, 'capacity' | 'othersWaiting' | 'behindBacklog'> {
  /** What the group's dispatch starts is over the process's room (Dispatcher: one run per queue at a time). */
  overRoom: boolean;
  taken(): void;
}

/** What the group needs of its process, read when a group is sent (not when its enqueues arrived). */
export interface GroupHost {
  /** The process's room for a group of `callers` enqueues on `queue`, and its hint of runs waiting in it (see EnqueueRequest). */
  room(queue: string, callers: number): GroupRoom;
  readonly closing: boolean;
}

/** An enqueue's answer, with the room its group held (to be `taken` once its runs execute). */
export type GroupEnqueued = Enqueued & { room: GroupRoom };

/** An enqueue as its caller makes it: the process's room and hint are read when its group is sent. */
export type GroupedRequest = Omit<EnqueueRequest, 'capacity' | 'othersWaiting' | 'behindBacklog'>;

interface Waiting {
  request: GroupedRequest;
  resolve: (enqueued: GroupEnqueued) => void;
  reject: (error: unknown) => void;
}

const roomOf = ({ capacity, othersWaiting, behindBacklog }: GroupRoom) => ({ capacity, othersWaiting, behindBacklog });

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
  async enqueue(request: GroupedRequest): Promise<GroupEnqueued> {
    assertValidClaim(request.claim);
    await this.#flow.ready();
    // On Citus every enqueue goes alone and at once: nothing to wait for.
    if (!this.#flow.dispatchesInline) {
      const room = this.#host.room(request.entry.queue, 1);
      try {
        return { ...(await enqueueRun(this.#sql, this.#clock, this.#flow, { ...request, ...roomOf(room) })), room };
      } catch (error) {
        room.taken();
        throw error;
      }
    }
    return new Promise<GroupEnqueued>((resolve, reject) => {
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
    let room: GroupRoom;
    try {
      room = this.#host.room(queue, group.length);
      requests = group.map(({ request }) => ({ ...request, ...roomOf(room) }));
    } catch (error) {
      group.forEach((waiting) => waiting.reject(error));
      this.#next(queue);
      return;
    }
    const refuse = (waiting: Waiting, reason: unknown) => {
      room.taken();
      waiting.reject(reason);
    };
    enqueueRuns(this.#sql, this.#clock, this.#flow, requests)
      .then(
        (results) => results.forEach((result, i) => (result.status === 'fulfilled' ? group[i]!.resolve({ ...result.value, room }) : refuse(group[i]!, result.reason))),
        (error: unknown) => group.forEach((waiting) => refuse(waiting, error)),
      )
      // The next group once this one's callers have executed what it started and given its room back
      // (their continuations are microtasks: done before an immediate), so that it reads the room left.
      .finally(() => ((this.#waiting.get(queue)?.length ?? 0) > 0 ? setImmediate(() => this.#next(queue)) : this.#next(queue)));
  }

  /** The next group of `queue`: the enqueues that waited, in order, one per key, at most MAX_GROUP. */
  #next(queue: string): void {
    const waiting = this.#waiting.get(queue) ?? [];
    if (waiting.length === 0 || this.#host.closing) {
      this.#waiting.delete(queue);
      if (waiting.length > 0) {
        const refused = shuttingDownError();
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
