/**
 * An engine's step limits: the limits it registers (`createEngine({ limits })`),
 * checked against every step of its workflows when the engine is created — a
 * step that names a limit the engine does not register is refused there, not
 * at its first run — and their settings written to the database once, before
 * the first step takes from one.
 */
import type { Sql } from '../db/connect.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import { translateDatabaseError } from '../errors/pg-errors.js';
import type { Workflow } from '../workflow/define.js';
import type { Limit } from './define-limit.js';
import { writeLimitSettings } from './sql/limit-settings.js';
import { tablesDistributed } from '../db/citus.js';
import type { StepLimits } from '../workflow/step-limits.js';
import type { CommitExtra } from '../workflow/commit.js';
import type { StepTarget } from '../workflow/steps.js';
import { commitAcquiring } from './limit-acquire.js';
import { afterGiveBack, giveBackWith } from './limit-release.js';

const LIMITS_ON_CITUS =
  'Step limits do not run on Citus yet (stepkey\'s tables are distributed in this database): ' +
  'remove the step\'s limit, or put the work on a queue (defineQueue), whose concurrency and rate limits do.';

export class LimitRegistry implements StepLimits {
  readonly #sql: Sql;
  readonly #limits = new Map<string, Limit>();
  #settings: Promise<void> | undefined;

  constructor(sql: Sql, limits: readonly Limit[], workflows: readonly Workflow[]) {
    this.#sql = sql;
    if (!Array.isArray(limits)) throw new StepkeyError('definition_error', 'limits must be an array of limits made with defineLimit().');
    for (const limit of limits) this.#add(limit);
    // A step given the limit object brings its definition; a step given a name needs it registered.
    for (const workflow of workflows) {
      for (const declaration of Object.values(workflow.steps)) {
        if (declaration.limitDefinition) this.#add(declaration.limitDefinition as Limit);
      }
    }
    for (const workflow of workflows) {
      for (const declaration of Object.values(workflow.steps)) {
        if (declaration.limit !== undefined && !this.#limits.has(declaration.limit)) {
          throw new StepkeyError(
            'definition_error',
            `Step '${declaration.name}' of workflow '${workflow.name}' v${workflow.version} names limit '${declaration.limit}', ` +
              `which this engine does not register (registered: ${this.names.length ? this.names.join(', ') : 'none'}); ` +
              'pass it in createEngine({ limits }).',
          );
        }
      }
    }
  }

  #add(limit: Limit): void {
    if (limit?.kind !== 'stepkey.limit') {
      throw new StepkeyError('definition_error', 'Only limits made with defineLimit() can be registered.');
    }
    const other = this.#limits.get(limit.name);
    if (other && other !== limit) {
      throw new StepkeyError('definition_error', `Limit '${limit.name}' is registered twice with different definitions.`);
    }
    this.#limits.set(limit.name, limit);
  }

  get names(): string[] {
    return [...this.#limits.keys()];
  }

  /** The registered limit of that name (every step's limit was checked when the engine was created). */
  require(name: string): Limit {
    const limit = this.#limits.get(name);
    if (!limit) throw new StepkeyError('definition_error', `Limit '${name}' is not registered with this engine; pass it in createEngine({ limits }).`);
    return limit;
  }

  /**
   * Writes every registered limit's settings to its row, once per engine.
   * Refuses a database whose tables Citus distributes: a limit's acquire and
   * give-back are single statements that join the coordinator's partitions
   * to the runs of every scope, which Citus does not run (queues do run there).
   */
  ready(): Promise<void> {
    this.#settings ??= tablesDistributed(this.#sql)
      .then(
        (distributed) => {
          if (distributed) throw new StepkeyError('invalid_options', LIMITS_ON_CITUS);
          return writeLimitSettings(this.#sql, [...this.#limits.values()]);
        },
      )
      .catch((error: unknown) => {
        // A database error is tried again at the next acquire; the refusal on Citus stands.
        if (error instanceof StepkeyError) throw error;
        this.#settings = undefined;
        throw translateDatabaseError(error, 'writing limit settings');
      });
    return this.#settings;
  }

  commitAcquiring(target: StepTarget, instance: string, extra?: CommitExtra): Promise<void> {
    return commitAcquiring(this, target, instance, extra);
  }

  readonly giveBackWith = giveBackWith;
  readonly afterGiveBack = afterGiveBack;
}
