/**
 * Schedules: a workflow started on a cron, by whichever worker runs the
 * schedule. graphile-worker's crontab fires the ticks (by the UTC minute, one
 * job per tick however many workers run it, and — when a worker starts —
 * once for each tick missed within `backfill`); each tick's job starts one
 * run, keyed by the schedule's name and the tick's time, so a tick is one
 * run even if its job runs twice.
 *
 *   export const nightly = defineSchedule({
 *     name: 'nightly-invoices', cron: '0 2 * * *', scope: 'billing',
 *     workflow: invoicing, input: (tick) => ({ day: tick.toISOString().slice(0, 10) }),
 *     backfill: 6 * 60 * 60 * 1000,
 *   });
 *   await runWorker({ database, workflows: [invoicing], schedules: [nightly] });
 */
import { parseCronItem, type ParsedCronItem } from 'graphile-worker';
import type { z } from 'zod';
import { StepkeyError } from '../errors/stepkey-error.js';
import { assertValidScope } from '../keys/validate.js';
import type { Workflow } from '../workflow/define.js';
import { summarise } from '../workflow/values.js';

type InputOf<W> = W extends Workflow<infer I> ? z.input<I> : never;

export interface ScheduleOptions<W extends Workflow> {
  /** The schedule's name: part of every run's key, and its crontab identifier. */
  name: string;
  /** A cron expression, five fields, UTC (`0 2 * * *`): graphile-worker's crontab syntax. */
  cron: string;
  workflow: W;
  /** The run's input, or a function of the tick's time (the same input for the same tick). */
  input: InputOf<W> | ((tick: Date) => InputOf<W>);
  /** The scope its runs are started in. */
  scope: string;
  /** How far back a worker that starts runs the ticks missed while no worker ran (ms; default 0: none). */
  backfill?: number;
}

export interface Schedule<W extends Workflow = Workflow> {
  readonly kind: 'stepkey.schedule';
  readonly name: string;
  readonly cron: string;
  readonly workflow: W;
  readonly scope: string;
  readonly backfillMs: number;
  /** The graphile-worker task that starts a tick's run. */
  readonly task: string;
  /** The crontab item the worker hands graphile-worker. */
  readonly cronItem: ParsedCronItem;
  inputFor(tick: Date): unknown;
  /** The key of a tick's run: `<name>@<tick, ISO>`. */
  keyFor(tick: Date): string;
}

const namePattern = /^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$/;

export function defineSchedule<W extends Workflow>(options: ScheduleOptions<W>): Schedule<W> {
  const where = `Schedule '${String(options?.name)}'`;
  if (typeof options?.name !== 'string' || !namePattern.test(options.name)) {
    throw new StepkeyError('definition_error', `${where}: the name must be 1–128 letters, digits or . _ / - (for example 'nightly-invoices').`);
  }
  if (options.workflow?.kind !== 'stepkey.workflow') {
    throw new StepkeyError('definition_error', `${where}: workflow must be made with defineWorkflow().`);
  }
  try {
    assertValidScope(options.scope);
  } catch (error) {
    throw new StepkeyError('definition_error', `${where}: ${(error as Error).message}`);
  }
  const backfillMs = options.backfill ?? 0;
  if (!Number.isFinite(backfillMs) || backfillMs < 0) {
    throw new StepkeyError('definition_error', `${where}: backfill must be a number of milliseconds ≥ 0, got ${backfillMs}.`);
  }
  const task = `stepkey:schedule:${options.name}`;
  let cronItem: ParsedCronItem;
  try {
    cronItem = parseCronItem({
      task,
      match: options.cron,
      identifier: task,
      options: { backfillPeriod: backfillMs },
    });
  } catch (error) {
    throw new StepkeyError(
      'definition_error',
      `${where}: the cron expression ${JSON.stringify(options.cron)} does not parse: ${(error as Error).message}`,
    );
  }
  const inputFor = (tick: Date): unknown => (typeof options.input === 'function' ? (options.input as (t: Date) => unknown)(tick) : options.input);
  if (typeof options.input !== 'function') {
    const parsed = options.workflow.input.safeParse(options.input);
    if (!parsed.success) {
      throw new StepkeyError('definition_error', `${where}: its input does not fit workflow '${options.workflow.name}': ${summarise(parsed.error)}.`);
    }
  }
  return Object.freeze({
    kind: 'stepkey.schedule' as const,
    name: options.name,
    cron: options.cron,
    workflow: options.workflow,
    scope: options.scope,
    backfillMs,
    task,
    cronItem,
    inputFor,
    keyFor: (tick: Date) => `${options.name}@${tick.toISOString()}`,
  });
}
