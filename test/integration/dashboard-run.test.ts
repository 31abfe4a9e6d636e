/**
 * The dashboard's run view (/api/run, what the run page renders): every
 * attempt of a call step from the effect record, an enqueue's attempt and its
 * delivery through the inbox, a wait's recorded step and a parked run's wait,
 * the child runs a run started, and its reruns.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { KeyTreeView, LiveEnvelope, MatchView } from '../../src/dashboard/api-types.js';
import { createDashboard, type Dashboard } from '../../src/dashboard/dashboard.js';
import { defineEffect } from '../../src/outbox/effect.js';
import { runWorker } from '../../src/worker/run-worker.js';
import { childRunKey } from '../../src/workflow/waits/children.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { uniqueKey } from '../helpers/ledger.js';

const db = useTestDatabase({ max: 8 });

const notify = defineEffect({
  name: 'dash-run.notify',
  payload: z.object({ n: z.number() }),
  async handler() {},
});

const child = defineWorkflow({
  name: 'dash-run-child',
  version: 1,
  input: z.object({ n: z.number() }),
  steps: { double: step('double.v1', { output: z.number() }) },
  async run({ input, steps }) {
    return steps.double.tx(async () => input.n * 2);
  },
});

const calls = new Map<string, number>();
const parent = defineWorkflow({
  name: 'dash-run-parent',
  version: 1,
  input: z.object({ n: z.number(), park: z.boolean().default(false) }),
  steps: {
    charge: step('charge.v1', { output: z.string(), retry: { attempts: 3, initialDelayMs: 5 } }),
    pause: step('pause.v1'),
    spawn: step('spawn.v1'),
    tell: step('tell.v1'),
  },
  async run({ input, steps, ctx }) {
    const paid = await steps.charge.call(async ({ attempt }) => {
      calls.set(ctx.key, attempt);
      if (attempt === 1) throw new Error('payments timed out');
      return `paid-${input.n}`;
    });
    await steps.pause.sleep(input.park ? 3_600_000 : 1);
    const doubled = await steps.spawn.child(child, { n: input.n });
    await steps.tell.enqueue(notify, { n: doubled });
    return paid;
  },
});

let dashboard: Dashboard;
beforeAll(() => {
  dashboard = createDashboard({ database: db(), onError: () => {} });
});
afterAll(() => dashboard.close());

async function runView(scope: string, key: string): Promise<MatchView> {
  const response = await dashboard.fetch(new Request(`http://127.0.0.1/api/run?scope=${scope}&key=${encodeURIComponent(key)}`, { headers: { host: '127.0.0.1' } }), {
    remoteAddress: '127.0.0.1',
  });
  expect(response.status).toBe(200);
  const envelope = (await response.json()) as LiveEnvelope<KeyTreeView>;
  if (envelope.unchanged) throw new Error('unexpected unchanged answer');
  expect(envelope.data.matches).toHaveLength(1);
  return envelope.data.matches[0]!;
}

describe("the run page's view", () => {
  it('shows every call attempt, the wait, the child run, and the enqueue with its delivery', async () => {
    const engine = testEngine(db(), [parent, child]);
    const worker = await runWorker({ database: db(), effects: [notify], engine: testEngine(db(), [parent, child]), concurrency: 1, purgeSchedule: false, onError: () => {} });
    try {
      engine.startSweeper();
      const key = uniqueKey('shown');
      const handle = await engine.start(parent, { scope: 'dash-run', key }, { n: 4 });
      await expect.poll(async () => (await engine.get(handle))?.status).toBe('completed');
      expect(await handle.result()).toBe('paid-4');
      const item = (view: MatchView, name: string) => {
        const found = view.items.find((entry) => entry.name === name);
        expect(found, name).toBeDefined();
        return found!;
      };
      // The delivery lands in the inbox, which the view reads.
      await expect.poll(async () => item(await runView('dash-run', key), 'tell.v1').inbox.length).toBe(1);
      const view = await runView('dash-run', key);

      const charge = item(view, 'charge.v1');
      expect(charge.row?.attempts).toBe(2);
      expect(charge.attempts.map((attempt) => [attempt.attempt, attempt.kind, attempt.outcome])).toEqual([
        [1, 'call', 'failed'],
        [2, 'call', 'ok'],
      ]);
      expect(charge.attempts[0]!.error).toMatch(/payments timed out/);
      expect(charge.attempts.every((attempt) => attempt.endedAt !== null && attempt.endedAt >= attempt.startedAt)).toBe(true);

      expect(item(view, 'pause.v1').row?.status).toBe('completed');

      const tell = item(view, 'tell.v1');
      expect(tell.attempts.map((attempt) => [attempt.attempt, attempt.kind, attempt.outcome])).toEqual([[1, 'enqueue', 'ok']]);
      expect(tell.inbox.map((entry) => entry.consumer)).toEqual(['dash-run.notify']);

      const spawned = item(view, 'spawn.v1');
      expect(view.children).toEqual([
        expect.objectContaining({ scope: 'dash-run', key: childRunKey(spawned.key), workflow: 'dash-run-child', version: 1, runStatus: 'completed' }),
      ]);
      // The child's own page names its parent.
      expect((await runView('dash-run', view.children[0]!.key)).row.parentRun).toBe(key);
    } finally {
      await worker.stop();
      await engine.shutdown();
    }
  });

  it('shows a parked run waiting, with the wait it is parked in and no child yet', async () => {
    const engine = testEngine(db(), [parent, child]);
    try {
      const key = uniqueKey('parked');
      const handle = await engine.start(parent, { scope: 'dash-run', key }, { n: 1, park: true });
      await expect.poll(async () => (await engine.get(handle))?.status).toBe('waiting');
      const view = await runView('dash-run', key);
      expect(view.runStatus).toBe('waiting');
      expect(view.row).toMatchObject({ status: 'waiting', waitKind: 'timer', waitStep: 'pause.v1' });
      expect(view.row.wakeAt).toBeGreaterThan(view.row.createdAt + 3_000_000);
      expect(view.children).toEqual([]);
      expect(view.items.find((entry) => entry.name === 'charge.v1')?.attempts).toHaveLength(2);
    } finally {
      await engine.shutdown();
    }
  });
});
