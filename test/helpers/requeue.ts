/**
 * The fixture of the requeue tests (flow-requeue*.test.ts): a workflow whose
 * work step can be made to fail or to wait at a gate the test opens, on a
 * queue of one slot, recording each attempt's interval in the database it is
 * told to (an upgrade test points it at a database of its own), and the
 * engines made for it, which the test shuts down.
 */
import { z } from 'zod';
import type { Database } from '../../src/db/connect.js';
import type { Engine } from '../../src/engine/engine.js';
import { defineQueue } from '../../src/flow/define-queue.js';
import { purposeFingerprint } from '../../src/keys/fingerprint.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import type { TestDatabase } from './database.js';
import { testEngine } from './engine.js';
import { gates, recordEnd, recordStart } from './flow.js';
import { LONG_LEASE_MS } from './patience.js';

export type Ref = { scope: string; key: string };

export function requeueFixture(db: () => TestDatabase) {
  /** The database the workflow records its intervals in. */
  let current: () => Database = db;
  /** Gates the test opens: a run waits at its step until its gate opens. */
  const { gate, openAll } = gates();
  /** Runs whose work step throws (a retryable error, past its two attempts: the run fails, resumable). */
  const failing = new Set<string>();
  const prepared = new Map<string, number>();
  const worked = new Map<string, number>();

  const flaky = defineWorkflow({
    name: 'rq-flaky',
    version: 1,
    input: z.object({ id: z.string(), hold: z.boolean().default(false) }),
    steps: {
      prep: step('rq-prep.v1'),
      // Held at a gate the test opens: no attempt timeout cuts it first, however long a busy host takes.
      work: step('rq-work.v1', { retry: { attempts: 2, initialDelayMs: 10 }, timeoutMs: LONG_LEASE_MS }),
    },
    async run({ input, steps }) {
      await steps.prep.call(async () => {
        prepared.set(input.id, (prepared.get(input.id) ?? 0) + 1);
        return 'prepared';
      });
      await steps.work.call(async () => {
        const interval = await recordStart(current().sql, input.id, 't');
        try {
          if (input.hold) await gate(input.id).opened;
          if (failing.has(input.id)) throw new Error('provider down');
          worked.set(input.id, (worked.get(input.id) ?? 0) + 1);
          return input.id;
        } finally {
          await recordEnd(current().sql, interval);
        }
      });
      return { id: input.id };
    },
  });

  const single = defineQueue({ name: 'rq-single', concurrency: 1 });
  const engines: Engine[] = [];
  const engine = (database: TestDatabase = db(), options: Parameters<typeof testEngine>[2] = {}) => {
    const made = testEngine(database, [flaky], { queues: [single], ...options });
    engines.push(made);
    return made;
  };

  return {
    flaky,
    single,
    gate,
    openAll,
    failing,
    prepared,
    worked,
    engines,
    engine,
    /** The workflow records its intervals in `database` from now on (the test's own by default). */
    recordIn(database: () => Database = db) {
      current = database;
    },
  };
}

/** A run's status, wait and lease as its row holds them. */
export const runStatus = async (sql: Database['sql'], ref: Ref) =>
  (await sql<{ status: string; wait_kind: string | null; lease_token: string | null }[]>`
    select status, wait_kind, lease_token::text from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key}`)[0];

/** The fingerprint engine.enqueue gives a run of `rq-flaky` on `rq-single` at priority 0. */
export const enqueueFingerprint = (input: unknown) => purposeFingerprint('rq-flaky', { input, queue: 'rq-single', priority: 0 });
