/**
 * Declaring workflows: named, versioned steps with zod schemas.
 *
 *   export const checkout = defineWorkflow({
 *     name: 'checkout', version: 1,
 *     input: z.object({ orderId: z.string() }),
 *     steps: {
 *       reserve: step('reserve-inventory.v1'),
 *       charge: step('charge-card.v1', { output: z.object({ paymentId: z.string() }) }),
 *     },
 *     async run({ input, steps, ctx }) { … },
 *   });
 *
 * Step names are contracts between deploys: a run records each step under its
 * name, and a resumed run finds its finished steps by those names. Change a
 * step's meaning, change its name (charge-card.v2) or the workflow's version.
 */
import type { z } from 'zod';
import { StepkeyError } from '../errors/stepkey-error.js';
import { assertValidStepName } from '../keys/validate.js';
import { resolveRetryPolicy, DEFAULT_STEP_TIMEOUT_MS, type ResolvedRetryPolicy, type RetryPolicy } from './retry.js';
import type { RunArguments } from './handles.js';

export type AnySchema = z.ZodType;

export interface StepOptions<Output extends AnySchema | undefined = AnySchema | undefined> {
  /** Schema of the step's result: checked when it runs, and applied again when it replays. */
  output?: Output;
  retry?: RetryPolicy;
  /**
   * How long one attempt may take (default 30 s). A `call` is aborted through
   * its signal; a `tx` step's transaction is rolled back (a statement still
   * running is cancelled by Postgres). Either way the attempt is retried.
   */
  timeoutMs?: number;
}

/** A declared step. `Output` is its schema, or undefined for a plain JSON result. */
export interface StepDeclaration<Output extends AnySchema | undefined = AnySchema | undefined> {
  readonly name: string;
  readonly output: Output;
  readonly retry: ResolvedRetryPolicy;
  readonly timeoutMs: number;
}

export function step(name: string): StepDeclaration<undefined>;
export function step<Output extends AnySchema | undefined>(
  name: string,
  options: StepOptions<Output>,
): StepDeclaration<Output>;
export function step(name: string, options: StepOptions = {}): StepDeclaration {
  assertValidStepName(name);
  const timeoutMs = options.timeoutMs ?? DEFAULT_STEP_TIMEOUT_MS;
  if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) {
    throw new StepkeyError('definition_error', `Step '${name}': timeoutMs must be a positive number, got ${timeoutMs}.`);
  }
  return Object.freeze({
    name,
    output: options.output,
    retry: resolveRetryPolicy(options.retry, `Step '${name}'`),
    timeoutMs,
  });
}

export type StepDeclarations = Record<string, StepDeclaration>;

export interface WorkflowOptions<
  Input extends AnySchema,
  Output extends AnySchema | undefined,
  Steps extends StepDeclarations,
  Result,
> {
  name: string;
  version: number;
  input: Input;
  /** Schema of the run's result; without it, the result must be plain JSON. */
  output?: Output;
  steps: Steps;
  run: (args: RunArguments<z.output<Input>, Steps>) => Promise<Output extends AnySchema ? z.input<Output> : Result>;
}

/** A workflow definition: one version of one workflow. */
export interface Workflow<Input extends AnySchema = AnySchema, Result = unknown, Steps extends StepDeclarations = StepDeclarations> {
  readonly kind: 'stepkey.workflow';
  readonly name: string;
  readonly version: number;
  readonly input: Input;
  readonly output: AnySchema | undefined;
  readonly steps: Steps;
  /** A method, so that a workflow with specific steps is assignable to Workflow (bivariant parameters). */
  run(args: RunArguments<z.output<Input>, Steps>): Promise<unknown>;
  /** Type carrier for the result; always undefined at run time. */
  readonly __result?: Result;
}

export type WorkflowInput<W> = W extends Workflow<infer I, unknown, StepDeclarations> ? z.input<I> : never;
export type WorkflowResult<W> = W extends Workflow<AnySchema, infer R, StepDeclarations> ? R : never;

const workflowNamePattern = /^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$/;

export function defineWorkflow<
  Input extends AnySchema,
  Steps extends StepDeclarations,
  Result,
  Output extends AnySchema | undefined = undefined,
>(
  options: WorkflowOptions<Input, Output, Steps, Result>,
): Workflow<Input, Output extends AnySchema ? z.output<Output> : Result, Steps> {
  const where = `Workflow '${String(options?.name)}'`;
  if (typeof options?.name !== 'string' || !workflowNamePattern.test(options.name)) {
    throw new StepkeyError(
      'definition_error',
      `${where}: the name must be 1–128 letters, digits or . _ / - (for example 'checkout').`,
    );
  }
  if (!Number.isInteger(options.version) || options.version < 1) {
    throw new StepkeyError('definition_error', `${where}: version must be a positive whole number, got ${options.version}.`);
  }
  if (!options.input || typeof (options.input as { safeParse?: unknown }).safeParse !== 'function') {
    throw new StepkeyError('definition_error', `${where}: input must be a zod schema.`);
  }
  if (typeof options.run !== 'function') {
    throw new StepkeyError('definition_error', `${where}: run must be a function.`);
  }
  const seen = new Map<string, string>();
  for (const [handle, declaration] of Object.entries(options.steps ?? {})) {
    if (!declaration || typeof declaration.name !== 'string' || !declaration.retry) {
      throw new StepkeyError('definition_error', `${where}: steps.${handle} must be declared with step('name.v1').`);
    }
    const other = seen.get(declaration.name);
    if (other !== undefined) {
      throw new StepkeyError(
        'definition_error',
        `${where}: steps.${other} and steps.${handle} share the step name '${declaration.name}'; every step needs its own name.`,
      );
    }
    seen.set(declaration.name, handle);
  }
  return Object.freeze({
    kind: 'stepkey.workflow' as const,
    name: options.name,
    version: options.version,
    input: options.input,
    output: options.output,
    steps: options.steps ?? ({} as Steps),
    run: options.run as (args: RunArguments<z.output<Input>, Steps>) => Promise<unknown>,
  });
}
