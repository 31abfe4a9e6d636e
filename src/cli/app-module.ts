/**
 * Loading the application's module: its workflows, its effects and (for
 * `migrate`) its own migrations.
 *
 *   // stepkey.config.ts
 *   export const workflows = [checkoutV1, checkoutV2];
 *   export const effects = [sendEmail];
 *   export const migrations = [{ folder: './drizzle', schema: 'shop' }];
 *
 * `--app PATH` names the module; without it, ./stepkey.config.ts (or .js,
 * .mjs) in the working directory is used when present. The same exports on a
 * default-exported object work too. How a TypeScript module is loaded:
 * app-import.ts.
 */
import { existsSync } from 'node:fs';
import type { AppMigrations } from '../db/migrate.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import type { Effect } from '../outbox/effect.js';
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
  migrations: AppMigrations[];
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
  const fallback = (loaded.default && typeof loaded.default === 'object' ? loaded.default : {}) as Record<string, unknown>;
  const pick = (name: string) => loaded[name] ?? fallback[name];
  return {
    path,
    workflows: listOf(pick('workflows'), 'workflows', path, (item): item is Workflow =>
      (item as Workflow | null)?.kind === 'stepkey.workflow'),
    effects: listOf(pick('effects'), 'effects', path, (item): item is Effect => (item as Effect | null)?.kind === 'stepkey.effect'),
    migrations: listOf(pick('migrations'), 'migrations', path, (item): item is AppMigrations =>
      typeof (item as AppMigrations | null)?.folder === 'string'),
  };
}

function listOf<T>(value: unknown, name: string, path: string, accept: (item: unknown) => item is T): T[] {
  if (value === undefined) return [];
  const what =
    name === 'workflows'
      ? 'workflows made with defineWorkflow()'
      : name === 'effects'
        ? 'effects made with defineEffect()'
        : '{ folder, schema?, table? } objects';
  if (!Array.isArray(value)) {
    throw new StepkeyError('definition_error', `The app module '${path}' exports '${name}' that is not an array of ${what}.`);
  }
  value.forEach((item, index) => {
    if (!accept(item)) {
      throw new StepkeyError('definition_error', `The app module '${path}': ${name}[${index}] is not one of ${what}.`);
    }
  });
  return value as T[];
}
