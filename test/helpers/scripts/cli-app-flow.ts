/**
 * An app module with more than workflows and effects, for `stepkey worker`:
 * a schedule that starts `cli-ticked` every minute (with a backfill, so that a
 * test makes ticks come due by moving the schedule's last execution back), a
 * queue, and a step limit that `cli-throttled`'s step names by name only — so
 * an engine that does not register the limit refuses the workflow.
 */
import { z } from 'zod';
import { defineLimit } from '../../../src/flow/define-limit.js';
import { defineQueue } from '../../../src/flow/define-queue.js';
import { defineSchedule } from '../../../src/schedules/define-schedule.js';
import { defineWorkflow, step } from '../../../src/workflow/define.js';

export const ticked = defineWorkflow({
  name: 'cli-ticked',
  version: 1,
  input: z.object({ tick: z.string() }),
  steps: { note: step('note.v1') },
  async run({ input, steps }) {
    return steps.note.tx(async () => input.tick);
  },
});

export const throttled = defineWorkflow({
  name: 'cli-throttled',
  version: 1,
  input: z.object({ n: z.number() }),
  steps: { double: step('double.v1', { limit: 'cli-partner' }) },
  async run({ input, steps }) {
    return steps.double.tx(async () => input.n * 2);
  },
});

export const partner = defineLimit({ name: 'cli-partner', concurrency: 2 });
export const reports = defineQueue({ name: 'cli-reports', concurrency: 1 });
export const everyMinute = defineSchedule({
  name: 'cli-every-minute',
  cron: '* * * * *',
  workflow: ticked,
  input: (tick) => ({ tick: tick.toISOString() }),
  scope: 'cli-scheduled',
  backfill: 10 * 60_000,
});

export const workflows = [ticked, throttled];
export const schedules = [everyMinute];
export const queues = [reports];
export const limits = [partner];
