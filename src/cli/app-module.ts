/**
 * Loading the application's module: what the `stepkey` command runs and
 * reads — its workflows, effects, schedules, queues, limits and (for
 * `migrate`) its own migrations.
 *
 *   // stepkey.config.ts
 *   export const workflows = [checkoutV1, checkoutV2];
 *   export const effects = [sendEmail];
 *   export const schedules = [nightlyInvoices];
 *   export const queues = [reports];
 *   export const limits = [payments];
 *   export const migrations = [{ folder: './drizzle', schema: 'shop' }];
 *
 * `--app PATH` names the module; without it, ./stepkey.config.ts (or .js,
 * .mjs) in the working directory is used when present. The same exports on a
 * default-exported object work too. A definition the module exports outside
 * these lists (a schedule exported alone, an array of queues under another
 * name) would not run: the module is refused, naming it. How a TypeScript
 * module is loaded: app-import.ts.
 */
import { existsSync } from 'node:fs';
import type { AppMigrations } from '../db/migrate.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import type { Limit } from '../flow/define-limit.js';
import type { Queue } from '../flow/define-queue.js';
import type { Effect } from '../outbox/effect.js';
import type { Schedule } from '../schedules/define-schedule.js';
import type { Workflow } from '../workflow/define.js';
import { importAppModule } from './app-import.js';
import type { CliContext } from './context.js';
import { CliFailure, UsageError } from './errors.js';

export const defaultAppFiles = ['stepkey.config.ts', 'stepkey.config.js', 'stepkey.config.mjs'] as const;

export interface AppModule {
  /** Absolute path of the module. */
  path: string;
  workflows: Workflow[];
  effects: Effect[];
  schedules: Schedule[];
  queues: Queue[];
  limits: Limit[];
  migrations: AppMigrations[];
}

type ListName = Exclude<keyof AppModule, 'path'>;

/** Each list the module may export: what its items are, and the kind a definition of it carries. */
const lists: Record<ListName, { what: string; kind?: string; accept: (item: unknown) => boolean }> = {
  workflows: { what: 'workflows made with defineWorkflow()', kind: 'stepkey.workflow', accept: (item) => kindOf(item) === 'stepkey.workflow' },
  effects: { what: 'effects made with defineEffect()', kind: 'stepkey.effect', accept: (item) => kindOf(item) === 'stepkey.effect' },
  schedules: { what: 'schedules made with defineSchedule()', kind: 'stepkey.schedule', accept: (item) => kindOf(item) === 'stepkey.schedule' },
  queues: { what: 'queues made with defineQueue()', kind: 'stepkey.queue', accept: (item) => kindOf(item) === 'stepkey.queue' },
  limits: { what: 'limits made with defineLimit()', kind: 'stepkey.limit', accept: (item) => kindOf(item) === 'stepkey.limit' },
  migrations: { what: '{ folder, schema?, table? } objects', accept: (item) => typeof (item as AppMigrations | null)?.folder === 'string' },
};
const listNames = Object.keys(lists) as ListName[];

function kindOf(value: unknown): unknown {
  return value !== null && typeof value === 'object' ? (value as { kind?: unknown }).kind : undefined;
}

/** The module's path: --app, else a default file in the working directory, else undefined. */
export function findAppModule(context: CliContext): string | undefined {
  if (context.flags.app !== undefined) {
    const path = context.resolvePath(context.flags.app);
    if (!existsSync(path)) throw new UsageError(`--app: no such file '${context.flags.app}'.`, context.command);
    return path;
  }
  return defaultAppFiles.map((file) => context.resolvePath(file)).find((path) => existsSync(path));
}

export async function loadAppModule(context: CliContext, options: { required: true }): Promise<AppModule>;
export async function loadAppModule(context: CliContext, options: { required: false }): Promise<AppModule | undefined>;
export async function loadAppModule(context: CliContext, options: { required: boolean }): Promise<AppModule | undefined> {
  const path = findAppModule(context);
  if (path === undefined) {
    if (!options.required) return undefined;
    throw new UsageError(
      `'stepkey ${context.command}' needs the app's workflows and effects: pass --app PATH ` +
        `or create ./stepkey.config.ts exporting them.`,
      context.command,
    );
  }
  let loaded: Record<string, unknown>;
  try {
    loaded = await importAppModule(path, (text) => context.warn(text));
  } catch (error) {
    if (error instanceof CliFailure) throw error;
    throw new CliFailure('app_module', `Could not load the app module '${path}': ${error instanceof Error ? error.message : String(error)}`);
  }
  return readAppModule(path, loaded);
}

/** The module's lists, checked: each an array of its kind, and no definition left outside them. */
export function readAppModule(path: string, loaded: Record<string, unknown>): AppModule {
  const fallback = loaded.default;
  if (fallback !== undefined && (fallback === null || typeof fallback !== 'object' || Array.isArray(fallback))) {
    throw new StepkeyError('definition_error', `The app module '${path}': its default export must be an object of ${listNames.join(', ')}.`);
  }
  const exported: Record<string, unknown> = { ...(fallback as Record<string, unknown> | undefined), ...loaded };
  delete exported.default;
  const app = { path } as AppModule;
  for (const name of listNames) app[name] = listOf(exported[name], name, path) as never;
  const runs = runnable(app);
  for (const [name, value] of Object.entries(exported)) {
    if (!(listNames as string[]).includes(name)) refuseStray(app, runs, name, value);
  }
  return app;
}

function listOf(value: unknown, name: ListName, path: string): unknown[] {
  if (value === undefined) return [];
  const { what, accept } = lists[name];
  if (!Array.isArray(value)) {
    throw new StepkeyError('definition_error', `The app module '${path}' exports '${name}' that is not an array of ${what}.`);
  }
  value.forEach((item, index) => {
    if (!accept(item)) throw new StepkeyError('definition_error', `The app module '${path}': ${name}[${index}] is not one of ${what}.`);
  });
  return value;
}

/**
 * Every definition the lists bring into play: theirs, a schedule's workflow,
 * and a limit a step names by its definition (the engine registers both).
 */
function runnable(app: AppModule): Set<unknown> {
  const runs = new Set<unknown>(listNames.flatMap((name) => app[name] as unknown[]));
  for (const schedule of app.schedules) runs.add(schedule.workflow);
  for (const workflow of [...app.workflows, ...app.schedules.map((schedule) => schedule.workflow)]) {
    for (const step of Object.values(workflow.steps)) if (step.limitDefinition) runs.add(step.limitDefinition);
  }
  return runs;
}

/** An export outside the lists is the app's own business — unless it holds a definition nothing would run. */
function refuseStray(app: AppModule, runs: Set<unknown>, name: string, value: unknown): void {
  const items = Array.isArray(value) ? value : [value];
  for (const item of items) {
    const list = listNames.find((candidate) => lists[candidate].kind !== undefined && lists[candidate].kind === kindOf(item));
    if (list === undefined || runs.has(item)) continue;
    const label = `'${(item as { name?: unknown }).name}'`;
    throw new StepkeyError(
      'definition_error',
      Array.isArray(value)
        ? `The app module '${app.path}' exports '${name}', an array holding ${lists[list].what} (${label}), which stepkey does not read: ` +
            `it reads ${listNames.join(', ')}. Put them in '${list}'.`
        : `The app module '${app.path}' exports '${name}', one of ${lists[list].what} (${label}) that is not in its '${list}': ` +
            `stepkey would not run it. Add it to '${list}'.`,
    );
  }
  const singular = listNames.find((candidate) => candidate.replace(/s$/, '') === name);
  if (singular !== undefined && (app[singular] as unknown[]).length === 0) {
    throw new StepkeyError('definition_error', `The app module '${app.path}' exports '${name}', which stepkey does not read: did you mean '${singular}'?`);
  }
}
