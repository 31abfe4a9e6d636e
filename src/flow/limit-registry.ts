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
import { afterExecution, afterGiveBack, afterRelease, giveBackLeft, giveBackWith, releaseWith } from './limit-release.js';
import type { KeyRef } from '../ledger/types.js';
import type { Queryable } from '../db/connect.js';
import type { RunState } from '../workflow/run-state.js';
import type { StepRow } from '../workflow/sql/step-rows.js';

export class LimitRegistry implements StepLimits {
  readonly #sql: Sql;
  readonly #limits = new Map<string, Limit>();
  #settings: Promise<void> | undefined;
  /** stepkey's tables are distributed by Citus (known once `ready` has resolved). */
  #distributed = false;
  /** `ready` has resolved. */
  #ready = false;

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

  /** The settings are written and the database's kind known. */
  get isReady(): boolean {
    return this.#ready;
  }

  /** Whether stepkey's tables are distributed by Citus: known once `ready` has resolved. */
  get distributed(): boolean {
    return this.#distributed;
  }

  /**
   * Writes every registered limit's settings to its row, once per engine,
   * and finds out whether the database is distributed by Citus (the
   * acquire and give-back then take the statements Citus runs).
   */
  ready(): Promise<void> {
    this.#settings ??= tablesDistributed(this.#sql)
      .then((distributed) => {
        this.#distributed = distributed;
        return writeLimitSettings(this.#sql, [...this.#limits.values()]);
      })
      .then(() => {
        this.#ready = true;
      })
      .catch((error: unknown) => {
        // A database error is tried again at the next acquire.
        this.#settings = undefined;
        throw translateDatabaseError(error, 'writing limit settings');
      });
    return this.#settings;
  }

  commitAcquiring(target: StepTarget, instance: string, extra?: CommitExtra): Promise<void> {
    return commitAcquiring(this, target, instance, extra);
  }

  giveBackWith(state: RunState, q: Queryable, rows: readonly StepRow[]) {
    return giveBackWith(state, q, rows, this.#distributed);
  }

  readonly afterGiveBack = afterGiveBack;
  readonly afterRelease = afterRelease;

  releaseWith(state: RunState, q: Queryable) {
    return releaseWith(state, q, this.#distributed);
  }

  afterExecution(state: RunState): Promise<void> {
    return afterExecution(state, this.#distributed);
  }

  /** On Citus (an engine that registers limits): the slots runs left when they stopped executing, given back. */
  async sweep(onError: (error: unknown, context: string) => void): Promise<KeyRef[]> {
    if (this.#limits.size === 0 || !(await tablesDistributed(this.#sql))) return [];
    return giveBackLeft(this.#sql, (error, run) => onError(translateDatabaseError(error, 'giving back limit slots'), `giving back the limit slots of run '${run.key}'`));
  }
}
