/**
 * Workflows that wait, for crash tests, and a process that runs them.
 *
 *   node --import tsx wait-workflows.ts start <db> <scope> <napMs> <key…>   starts a napping run per key, prints STARTED
 *   node --import tsx wait-workflows.ts order <db> <scope> <key>           runs an order whose step waits on a child run
 *   node --import tsx wait-workflows.ts queued-order <db> <scope> <key>    the same, its child on the queue crash-parcels
 *   node --import tsx wait-workflows.ts sweep <db>                         sweeps (expired and due runs) until killed
 *
 * Every step writes a row to wait_effects (run root, step, stepkey's time, the
 * process's pid), so a test counts what ran, and where. Fault points arrive in
 * STEPKEY_FAULTS; lease and sweep interval in STEPKEY_LEASE_MS and
 * STEPKEY_SWEEP_INTERVAL_MS; WAIT_CLOCK_OFFSET_MS moves the process's clock
 * ahead (a sweeper for whom hours have passed); WAIT_DEADLINE_MS gives an
 * order a deadline.
 */
import { z } from 'zod';
import { Clock } from '../../../src/db/clock.js';
import { connect } from '../../../src/db/connect.js';
import { defineWorkflow, step } from '../../../src/workflow/define.js';
import { createEngine } from '../../../src/engine/engine.js';
import { defineQueue } from '../../../src/flow/define-queue.js';

const clock = new Clock();
clock.advance(Number(process.env.WAIT_CLOCK_OFFSET_MS ?? 0));

const effect = (name: string) => async (_db: unknown, { sql }: { sql: import('../../../src/db/transaction.js').TxSql }, root: string) => {
  await sql`
    insert into wait_effects (run_key, step, at, pid)
    values (${root}, ${name}, clock_timestamp() + ${clock.offsetMs}::float8 * interval '1 millisecond', ${process.pid})`;
};

export const nap = defineWorkflow({
  name: 'crash-nap',
  version: 1,
  input: z.object({ napMs: z.number() }),
  steps: { before: step('before.v1'), nap: step('nap.v1'), after: step('after.v1') },
  async run({ input, steps, ctx }) {
    await steps.before.tx((db, c) => effect('before.v1')(db, c, ctx.rootKey));
    await steps.nap.sleep(input.napMs);
    await steps.after.tx((db, c) => effect('after.v1')(db, c, ctx.rootKey));
    return 'rested';
  },
});

export const parcel = defineWorkflow({
  name: 'crash-parcel',
  version: 1,
  input: z.object({ order: z.string() }),
  steps: { pack: step('pack.v1') },
  async run({ input, steps, ctx }) {
    await steps.pack.tx((db, c) => effect('pack.v1')(db, c, ctx.rootKey));
    return { parcel: `P-${input.order}` };
  },
});

export const order = defineWorkflow({
  name: 'crash-order-with-child',
  version: 1,
  input: z.object({ order: z.string() }),
  steps: { ship: step('ship-order.v1'), confirm: step('confirm.v1') },
  async run({ input, steps, ctx }) {
    const { parcel: id } = await steps.ship.child(parcel, { order: input.order });
    await steps.confirm.tx((db, c) => effect('confirm.v1')(db, c, ctx.rootKey));
    return { parcel: id };
  },
});

/** One parcel packed at a time. */
export const parcels = defineQueue({ name: 'crash-parcels', concurrency: 1 });

export const queuedOrder = defineWorkflow({
  name: 'crash-order-with-queued-child',
  version: 1,
  input: z.object({ order: z.string() }),
  steps: { ship: step('ship-order.v1'), confirm: step('confirm.v1') },
  async run({ input, steps, ctx }) {
    const { parcel: id } = await steps.ship.child(parcel, { order: input.order }, { queue: parcels });
    await steps.confirm.tx((db, c) => effect('confirm.v1')(db, c, ctx.rootKey));
    return { parcel: id };
  },
});

async function main(): Promise<void> {
  const [mode, url, scope, ...rest] = process.argv.slice(2) as [string, string, string, ...string[]];
  const database = connect(url, { max: 6 });
  const engine = createEngine({ database, workflows: [nap, parcel, order, queuedOrder], queues: [parcels], clock, onError: () => {} });
  if (mode === 'start') {
    const [napMs, ...keys] = rest;
    for (const key of keys) await engine.start(nap, { scope, key }, { napMs: Number(napMs) });
    console.log('STARTED');
  } else if (mode === 'order' || mode === 'queued-order') {
    const deadline = process.env.WAIT_DEADLINE_MS ? { deadline: Number(process.env.WAIT_DEADLINE_MS) } : {};
    const result = await engine.run(mode === 'order' ? order : queuedOrder, { scope, key: rest[0]! }, { order: rest[0]! }, deadline);
    console.log(`RESULT ${JSON.stringify(result)}`);
    await engine.shutdown();
    await database.close();
  } else if (mode === 'sweep') {
    engine.startSweeper();
    console.log('SWEEPER READY');
  }
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop()!)) await main();
