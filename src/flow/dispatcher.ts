/**
 * The engine's side of queues: an enqueue's transaction and what follows it,
 * executing the runs a dispatch started in this process, and dispatching a
 * queue again as soon as one of its runs ends (the slot it gave back goes to
 * the next run at once, not at the next sweep).
 */
import type { Sql } from '../db/connect.js';
import type { Clock } from '../db/clock.js';
import type { KeyRef, Lease } from '../ledger/types.js';
import type { ClaimResult } from '../ledger/types.js';
import type { Workflow } from '../workflow/define.js';
import type { Settled } from '../workflow/executor.js';
import { newRootKey } from '../keys/derive.js';
import { instrument } from '../telemetry/instrumentation.js';
import { EnqueueGroups, type GroupRoom } from './enqueue-group.js';
import type { FlowControl, Versions } from './flow-control.js';
import type { QueuedRun } from './queued-run.js';
import { dispatchedRuns, type DispatchedRun, type FreshRun } from '../lifecycle/dispatch.js';
import type { HandOff, SlotHandOff } from '../workflow/slot-handoff.js';

/** A run the enqueue itself started: executed without loading what its caller already holds. */
export interface OwnRun {
  ref: KeyRef;
  definition: Workflow;
  input: unknown;
  rootKey: string;
  /** Its deadline (ms since the epoch, stepkey's clock), if it has one. */
  deadlineAtMs?: number | null;
}

/** What the dispatcher needs of the engine. */
export interface DispatchHost {
  readonly sql: Sql;
  readonly clock: Clock;
  readonly leaseMs: number;
  readonly maxConcurrentRuns: number;
  /** Runs executing in this process now. */
  readonly activeRuns: number;
  readonly closing: boolean;
  versions(): Versions;
  /** Executes `lease`'s run here (tracked like any other): `own`'s, `fresh`'s as its dispatch read it, or one loaded from the ledger. */
  execute(lease: Lease, own?: OwnRun, fresh?: FreshRun): Promise<Settled>;
  /** Runs `work`, which may start runs here, as a take in flight (shutdown waits for it). */
  taking<T>(work: () => Promise<T>): Promise<T>;
  onError(error: unknown, context: string): void;
}

export interface EnqueueOutcome {
  claim: ClaimResult;
  /** This call created the run. */
  own: boolean;
  rootKey: string;
  /** The run is waiting for a slot (a dispatch did not start it at once). */
  queued: boolean;
  /** This call resumed a failed run: it went back in line for a slot. */
  requeued: boolean;
}

/** A group given no room: it sends no dispatch (an entry of it that waits has its queue dispatched after the commit). */
const NO_ROOM: GroupRoom = { capacity: 0, othersWaiting: false, overRoom: false, taken: () => {} };

/** A group behind a backlog this process saw: no room either, and its entries take no lock (EnqueueRequest.behindBacklog). */
const BEHIND_BACKLOG: GroupRoom = { ...NO_ROOM, behindBacklog: true };

/** Whether the dispatch that started `runs` left a backlog (DispatchedRun.more; unknown on Citus: yes). An enqueue's own run, started at once, says none waited. */
const leftInLine = (runs: readonly DispatchedRun[]) => runs.some((run) => !run.atOnce && run.more !== false);

const idOf = (ref: KeyRef) => `${ref.scope}\u001f${ref.key}`;

export class Dispatcher implements SlotHandOff {
  readonly #host: DispatchHost;
  readonly #flow: FlowControl;
  /** Queues ('' for all) with a dispatch in flight from here: undefined, or what it was asked for again with (dispatchAfterEnd). */
  readonly #dispatching = new Map<string, { freeing: number; owed: boolean } | undefined>();
  /** Runs executing here that a dispatch started: the queue whose slot each holds. */
  readonly #holding = new Map<string, string>();
  /** Runs whose completion handed their slot over (their queue needs no dispatch after their end). */
  readonly #handedOver = new Set<string>();
  /**
   * Runs executing here that an owed dispatch started with no room left here
   * (or that such a run's completion handed its slot to), with the queue of
   * each: at most one per queue at a time. Its end dispatches the queue
   * again, so the queue drains here one run at a time over the room, never
   * by its own width.
   */
  readonly #overRoom = new Map<string, string>();
  /** Queues with an owed dispatch left to the end of a run over the room (see dispatchAfterEnd). */
  readonly #owedAfterOverRoom = new Set<string>();
  /** Queues with a dispatch over the room in flight from here (an owed dispatch, an enqueue's batch). */
  readonly #overRoomAsked = new Set<string>();
  /** Room held by dispatches in flight from here (after an end, an enqueue's batch): the runs each may start, until they execute. */
  #reserved = 0;
  /**
   * Per queue, whether runs were last seen waiting in line (unknown: yes):
   * seen by a completion's lock statement, a swap or a dispatch that started
   * runs, an enqueue whose entry waits; not seen by a look that found no
   * run in line. A completion sends its hand-off only then (on a queue that has
   * one: FlowControl.handOffCount), and an enqueue its dispatch; otherwise
   * the queue is dispatched after the commit, as for any slot given back
   * without a hand-off — a hint for cost, never for correctness (a swap that
   * found its run taken by another says none, and the look after its commit
   * follows).
   */
  readonly #waitingSeen = new Map<string, boolean>();
  /**
   * Queues with a backlog: the last dispatch from here that started runs
   * waiting in line (a dispatch after an end, or an enqueue's batch) took
   * every free slot and left runs due in line (DispatchedRun.more). So the next dispatch
   * after an end takes the queue's lock without the look first — the look
   * would find runs to start, and only delay them by a round trip and a wait
   * for the lock — and an enqueue takes no lock and holds no room
   * (EnqueueRequest.behindBacklog): its run waits, and the dispatch after its
   * commit starts what the slots allow, in line. A dispatch that left a slot
   * free or none due in line, or found none, or an enqueue's run that took its slot at once (none
   * was due before it), ends it; one that started none for want of a slot
   * does not. A hint for cost only: either way the dispatch under the lock decides.
   */
  readonly #backlog = new Set<string>();
  /** Per queue, how many times an enqueue here saw its run wait: a look that began before the last of them does not say none waits. */
  readonly #waitingSince = new Map<string, number>();
  /** Enqueues on one queue at once from this process: one transaction (flow/enqueue-group.ts). */
  readonly #groups: EnqueueGroups;

  constructor(host: DispatchHost, flow: FlowControl) {
    this.#host = host;
    this.#flow = flow;
    this.#groups = new EnqueueGroups(host.sql, host.clock, flow, {
      room: (queue, callers) => this.#groupRoom(queue, callers),
      get closing() {
        return host.closing;
      },
    });
  }

  get enabled(): boolean {
    return this.#flow.enabled;
  }

  /**
   * Enqueues the run (claim, entry, park and dispatch in one transaction) and
   * executes what that dispatch started here. A run the claim took over (its
   * process died) is the engine's to execute, as any claim's takeover is
   * (engine.enqueue: LocalRuns.resumeClaimed).
   */
  async enqueue(definition: Workflow, ref: KeyRef, run: QueuedRun, fingerprints: { fingerprint: string; legacyFingerprint: () => string }): Promise<EnqueueOutcome> {
    const host = this.#host;
    const root = newRootKey(ref.scope, ref.key);
    const { claim, dispatched, requeued, dispatchAfter, room } = await this.#groups.enqueue({
      ref,
      claim: { ...ref, ...fingerprints, kind: 'run', name: definition.name, run: { version: definition.version, input: run.inputText, ...(run.deadline ? { deadline: run.deadline } : {}) }, rootKey: root },
      entry: run.entry,
      leaseMs: host.leaseMs,
      versions: host.versions(),
    });
    const own = claim.state === 'owned' && !claim.resumed;
    if (own) instrument.runStarted(definition);
    // What the enqueue's transaction started is executed here, whatever its claim answered (a
    // duplicate's or a mismatch's batch takes no lock and starts nothing; were it otherwise, here).
    const ownRun = own ? { ref, definition, input: run.data, rootKey: root, deadlineAtMs: claim.state === 'owned' ? claim.deadlineAtMs ?? null : null } : undefined;
    try {
      this.startDispatched(run.entry.queue, dispatched, ownRun, room.overRoom);
    } finally {
      room.taken();
    }
    if (dispatched.length > 0) this.#sawBacklog(run.entry.queue, leftInLine(dispatched));
    if (dispatchAfter) this.dispatchAfterEnd(run.entry.queue, 0, true);
    if (claim.state === 'mismatch') return { claim, own: false, rootKey: root, queued: false, requeued: false };
    const mineStarted = dispatched.some((d) => d.scope === ref.scope && d.key === ref.key);
    if ((own || requeued) && !mineStarted) this.#sawWaiting(run.entry.queue);
    return { claim, own, rootKey: root, queued: (own || requeued) && !mineStarted, requeued };
  }

  #sawBacklog(queue: string, backlog: boolean): void {
    if (backlog) this.#backlog.add(queue);
    else this.#backlog.delete(queue);
  }

  #sawWaiting(queue: string): void {
    this.#waitingSeen.set(queue, true);
    this.#waitingSince.set(queue, (this.#waitingSince.get(queue) ?? 0) + 1);
  }

  /**
   * A claim outside enqueue (start, attempt, run, resume) resumed a failed
   * run that is on a queue: its takeover parked it for a slot (lifecycle/requeue.ts). Dispatches
   * its queue now, so that it starts at once here if a slot is free.
   */
  afterRequeue(claim: ClaimResult): void {
    this.dispatchQueue(claim.state === 'waiting' && claim.resumed ? claim.wait.for : null);
  }

  /**
   * Dispatches `queue` now if this process registers it: this process
   * changed it (a child's entry added, a failed run put back in line, a
   * slot given back by a run it took over) or saw a run come due in it, and
   * no other process will dispatch for that — so the dispatch happens even
   * with no room here (`owed`, see dispatchAfterEnd). `freeing`: runs of
   * this process about to end that still count as active (a parent parking
   * for the child it just queued).
   */
  dispatchQueue(queue: string | null, freeing = 0): void {
    if (queue !== null && this.#flow.names.includes(queue)) this.dispatchAfterEnd(queue, freeing, true);
  }

  /**
   * Executes runs a dispatch of `queue` just started here; when each ends
   * (its slot given back in the transaction of its end), the queue is
   * dispatched again so that the next run gets the slot at once.
   */
  startDispatched(queue: string, runs: readonly DispatchedRun[], own?: OwnRun, overRoom = false): void {
    for (const run of runs) {
      const lease = { scope: run.scope, key: run.key, token: run.token };
      const id = idOf(lease);
      const mine = own !== undefined && run.scope === own.ref.scope && run.key === own.ref.key;
      // An enqueue's own run, its slot taken at once, is its caller's start, not the dispatch's choice.
      const over = overRoom && !run.atOnce;
      this.#holding.set(id, queue);
      if (over) this.#overRoom.set(id, queue);
      this.#host
        .execute(lease, mine ? own : undefined, run.fresh)
        .catch((error: unknown) => this.#host.onError(error, `executing queued run '${run.key}'`))
        .finally(() => {
          if (this.#holding.get(id) === queue) this.#holding.delete(id);
          if (over) this.#overRoom.delete(id);
          // A dispatch left to this end happens even if the end handed its slot over (the hand-off may
          // have started nothing the request was for); while a run over the room still executes, it is
          // left to that one's end again.
          const handedOver = this.#handedOver.delete(id);
          const owedLeft = this.#owedAfterOverRoom.delete(queue);
          if (!handedOver || owedLeft) this.dispatchAfterEnd(queue, 0, true);
        });
    }
  }

  /**
   * The completion of a run holding a slot of a queue of one slot hands it
   * over: by a swap, or by a dispatch under the queue's lock if a run waits
   * and the lock is free (FlowControl.handOffStatements) — unless this
   * process last saw no run waiting in the queue. Otherwise (and on larger
   * queues, and on Citus) its end looks after the commit.
   */
  withCompletion(lease: { scope: string; key: string }): HandOff | undefined {
    const id = idOf(lease);
    const queue = this.#holding.get(id);
    const host = this.#host;
    if (queue === undefined || host.closing || this.#waitingSeen.get(queue) === false) return undefined;
    const count = this.#flow.handOffCount(queue);
    // No hand-off (Citus, a queue of more than one slot): the look after the commit dispatches.
    if (count === 0) return undefined;
    return {
      count,
      // The ending run's own room is free once it has ended.
      statements: (q) => this.#flow.handOffStatements(q, queue, Math.max(1, host.maxConcurrentRuns - host.activeRuns + 1), host.leaseMs, host.versions()),
      // The queue is this completion's own: another execution of the same run here (a stale one, taken
      // over meanwhile) may have ended and let go of the run's entry in #holding by now.
      after: (answers) => this.#afterHandOff(id, queue, answers),
    };
  }

  #afterHandOff(id: string, queue: string, answers: readonly unknown[]): void {
    // A swap's one answer, or the lock's and its dispatch's (FlowControl.handOffStatements).
    const lock = answers.length === 2 ? (answers[0] as readonly { waiting: boolean; name: string | null }[] | undefined)?.[0] : undefined;
    const runs = dispatchedRuns(answers[answers.length - 1] as readonly unknown[] | undefined);
    this.#waitingSeen.set(queue, lock ? lock.waiting : runs.length > 0);
    // The slot was handed over (the lock taken, or a swap started a run): no look after this end —
    // if its execution is still here to skip it — and what the dispatch started is executed here.
    if (answers.length === 2 ? !lock?.name : runs.length === 0) return;
    if (this.#holding.get(id) === queue) this.#handedOver.add(id);
    // A run over the room hands its slot to one that is over the room as well (its place, not a new one).
    this.startDispatched(queue, runs, undefined, this.#overRoom.has(id));
  }

  /**
   * Dispatches `queue` (waiting for its lock), or every queue no other
   * process is dispatching. One dispatch per queue at a time from this
   * process: a request while one is in flight makes it run once more when it
   * ends (its snapshot may predate what the request was for), so that many
   * ends and enqueues at once cost one waiter on the lock, not one each.
   * `freeing`: runs of this process about to end that still count as active
   * (a parent parking for the child it just queued). `owed`: this process
   * added an entry without the lock or gave a slot back without handing it
   * over — no other process will dispatch for it, so the dispatch happens
   * even with no room here, and may start one run (as an enqueue may),
   * unless a run so started is still executing here for the queue: its end
   * dispatches the queue again.
   */
  dispatchAfterEnd(queue?: string, freeing = 0, owed = false): void {
    const host = this.#host;
    if (host.closing || !this.#flow.enabled) return;
    const id = queue ?? '';
    if (this.#dispatching.has(id)) {
      const asked = this.#dispatching.get(id);
      this.#dispatching.set(id, { freeing: Math.max(asked?.freeing ?? 0, freeing), owed: (asked?.owed ?? false) || owed });
      return;
    }
    const admitted = this.#admit(queue, freeing, owed, 1);
    if (!admitted) return;
    this.#dispatching.set(id, undefined);
    const since = this.#waitingSince.get(id) ?? 0;
    const look = queue === undefined || !this.#backlog.has(queue);
    const dispatched = async () => {
      for (const result of await this.#flow.dispatch(admitted.capacity, host.leaseMs, host.versions(), queue, look)) {
        // Runs were waiting: the next completions hand their slots over again. A look that found no
        // run in line: the next enqueues send no dispatch (their entries, if they wait, are
        // dispatched after their commits) — unless an enqueue saw one waiting since the look began.
        if (result.runs.length > 0) this.#sawBacklog(result.queue, leftInLine(result.runs));
        else if (result.idle) this.#sawBacklog(result.queue, false);
        if (result.runs.length > 0) this.#waitingSeen.set(result.queue, true);
        else if (result.idle && (this.#waitingSince.get(result.queue) ?? 0) === since) this.#waitingSeen.set(result.queue, false);
        this.startDispatched(result.queue, result.runs, undefined, admitted.overRoom);
      }
    };
    host
      .taking(dispatched)
      .catch((error: unknown) => host.onError(error, `dispatching queue '${queue ?? '(all)'}'`))
      .finally(() => {
        // Given back once what it started is registered as executing (#admit).
        admitted.taken();
        const again = this.#dispatching.get(id);
        this.#dispatching.delete(id);
        if (again) this.dispatchAfterEnd(queue, again.freeing, again.owed);
      });
  }

  /**
   * What a dispatch of `queue` (undefined: every queue) may start now, held
   * for it until `taken` has been called `callers` times: the room left here —
   * maxConcurrentRuns less the runs executing (`freeing` of them about to
   * end) and the room dispatches in flight hold — or, owed with none left,
   * one run over it, unless a dispatch over the room is in flight or a run
   * it started executes here for the queue (undefined then: that run's end
   * dispatches the queue again).
   */
  #admit(queue: string | undefined, freeing: number, owed: boolean, callers: number): { capacity: number; overRoom: boolean; taken(): void } | undefined {
    const host = this.#host;
    const room = host.maxConcurrentRuns - Math.max(0, host.activeRuns - freeing) - this.#reserved;
    const overRoom = room <= 0 && owed && queue !== undefined;
    if (room <= 0 && !overRoom) return undefined;
    if (overRoom && (this.#overRoomAsked.has(queue) || [...this.#overRoom.values()].includes(queue))) {
      this.#owedAfterOverRoom.add(queue);
      return undefined;
    }
    const capacity = overRoom ? 1 : room;
    this.#reserved += capacity;
    if (overRoom) this.#overRoomAsked.add(queue);
    let left = callers;
    return {
      capacity,
      overRoom,
      taken: () => {
        left -= 1;
        if (left !== 0) return;
        this.#reserved -= capacity;
        if (!overRoom) return;
        this.#overRoomAsked.delete(queue);
        // A dispatch owed meanwhile was left to this one's run over the room: if it started none, it
        // is made now (after the runs it started, if any, are registered: a microtask later).
        queueMicrotask(() => this.#owedWithoutOverRoom(queue));
      },
    };
  }

  /** A dispatch left to a run over the room of `queue`, when none is in flight or executing here: made now. */
  #owedWithoutOverRoom(queue: string): void {
    if (!this.#owedAfterOverRoom.has(queue) || this.#overRoomAsked.has(queue) || [...this.#overRoom.values()].includes(queue)) return;
    this.#owedAfterOverRoom.delete(queue);
    this.dispatchAfterEnd(queue, 0, true);
  }

  /**
   * The room an enqueue group's dispatch may fill: as an owed dispatch's (the
   * group adds entries no other process dispatches for). With none to give,
   * the group sends no dispatch: an entry of it that waits has its queue
   * dispatched after the commit (dispatchAfterEnd), left to the run over the room.
   */
  #groupRoom(queue: string, callers: number): GroupRoom {
    // Behind a backlog seen (one PostgreSQL), its entries take no lock, so its dispatch would start
    // nothing; the room it held meanwhile would only keep the dispatch after an end from filling the
    // slots given back.
    if (this.#flow.dispatchesInline && this.#backlog.has(queue)) return BEHIND_BACKLOG;
    const admitted = this.#admit(queue, 0, true, callers);
    if (!admitted) return NO_ROOM;
    return { ...admitted, othersWaiting: this.#waitingSeen.get(queue) !== false };
  }

  /** A sweep's dispatch of every queue, up to `capacity` runs; returns how many it started. */
  async sweep(capacity: number): Promise<number> {
    if (!this.#flow.enabled || capacity <= 0) return 0;
    const results = await this.#flow.dispatch(capacity, this.#host.leaseMs, this.#host.versions());
    let started = 0;
    for (const { queue, runs } of results) {
      if (runs.length > 0) this.#waitingSeen.set(queue, true);
      this.startDispatched(queue, runs);
      started += runs.length;
    }
    return started;
  }
}
