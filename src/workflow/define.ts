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
import type { RunArguments, RunRef } from './handles.js';
import type { KeyRef } from '../ledger/types.js';
import type { PreviousAttempt } from './effects/attempts.js';
import type { StepLimitRef } from './step-limits.js';
import { resolveDeadline, type Deadline, type ResolvedDeadline } from '../lifecycle/deadline.js';

/** What a step's reconcile is given: the key the earlier attempts sent, and how they ended. */
export interface ReconcileContext {
  /** The step's derived idempotency key, as every attempt sent it. */
  key: string;
  /** The earlier attempts that did not succeed, the unknown ones among them. */
  previous: PreviousAttempt[];
  /** The run's scope (the tenant), to find the callee's account. */
  scope: string;
  /** Aborted when the lookup times out (the step's timeoutMs) or the run must stop. */
  signal: AbortSignal;
}

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
  /**
   * For `call` steps: asks the callee what an earlier attempt whose outcome
   * is unknown did (by the key), before calling again. What it returns is the
   * step's output — parsed by `output` — and the call is not made again;
   * undefined says the earlier attempt did nothing, and the call is made. It
   * runs only once the earlier attempt's lease has ended; a throw is retried
   * like the call.
   */
  reconcile?: (context: ReconcileContext) => Promise<(Output extends AnySchema ? z.input<Output> : unknown) | undefined>;
  /**
   * For `call` steps whose callee cannot dedupe: an attempt whose outcome is
   * unknown is never followed by another call (unless `reconcile` finds it
   * did nothing); the run stops as `needs_review` until an operator resolves
   * it (`stepkey resolve`, `engine.resolve`).
   */
  atMostOnce?: boolean;
  /**
   * A limit (defineLimit, registered with the engine) this step's `tx` and
   * `call` take a token and/or a slot from before their body runs, parking
   * the run until they can (src/flow/limit-acquire.ts). By object or name.
   */
  limit?: StepLimitRef | string;
}

/** A declared step. `Output` is its schema, or undefined for a plain JSON result. */
export interface StepDeclaration<Output extends AnySchema | undefined = AnySchema | undefined> {
  readonly name: string;
  readonly output: Output;
  readonly retry: ResolvedRetryPolicy;
  readonly timeoutMs: number;
  readonly reconcile: ((context: ReconcileContext) => Promise<unknown>) | undefined;
  readonly atMostOnce: boolean;
  /** The limit's name, and its definition when the step was given the object. */
  readonly limit: string | undefined;
  readonly limitDefinition: StepLimitRef | undefined;
}

export function step<Output extends AnySchema>(name: string, options: StepOptions<Output> & { output: Output }): StepDeclaration<Output>;
export function step(name: string, options?: StepOptions<undefined>): StepDeclaration<undefined>;
export function step(name: string, options: StepOptions = {}): StepDeclaration {
  assertValidStepName(name);
  const timeoutMs = options.timeoutMs ?? DEFAULT_STEP_TIMEOUT_MS;
  if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) {
    throw new StepkeyError('definition_error', `Step '${name}': timeoutMs must be a positive number, got ${timeoutMs}.`);
  }
  if (options.reconcile !== undefined && typeof options.reconcile !== 'function') {
    throw new StepkeyError('definition_error', `Step '${name}': reconcile must be a function ({ key, previous }) => output or undefined.`);
  }
  if (options.atMostOnce !== undefined && typeof options.atMostOnce !== 'boolean') {
    throw new StepkeyError('definition_error', `Step '${name}': atMostOnce must be true or false, got ${String(options.atMostOnce)}.`);
  }
  const limit = options.limit;
  if (limit !== undefined && typeof limit !== 'string' && (limit as { kind?: unknown })?.kind !== 'stepkey.limit') {
    throw new StepkeyError('definition_error', `Step '${name}': limit must be a limit made with defineLimit() or its name.`);
  }
  if (typeof limit === 'string' && limit.length === 0) {
    throw new StepkeyError('definition_error', `Step '${name}': limit must name a limit, got an empty string.`);
  }
  return Object.freeze({
    name,
    limit: typeof limit === 'string' ? limit : limit?.name,
    limitDefinition: typeof limit === 'string' ? undefined : limit,
    output: options.output,
    retry: resolveRetryPolicy(options.retry, `Step '${name}'`),
    timeoutMs,
    reconcile: options.reconcile as StepDeclaration['reconcile'],
    atMostOnce: options.atMostOnce ?? false,
  });
}

export type StepDeclarations = Record<string, StepDeclaration>;

/** The events a workflow's runs can receive (`engine.send`), each with the schema of its payload. */
export type EventDeclarations = Record<string, AnySchema>;

export interface WorkflowOptions<
  Input extends AnySchema,
  Output extends AnySchema | undefined,
  Steps extends StepDeclarations,
  Result,
  Events extends EventDeclarations = Record<never, never>,
  Name extends string = string,
> {
  name: Name;
  version: number;
  input: Input;
  /** Schema of the run's result; without it, the result must be plain JSON. */
  output?: Output;
  steps: Steps;
  /**
   * Events its runs can be sent (`engine.send(ref, topic, payload, { key })`)
   * and wait for (`steps.x.waitForEvent(topic)`): topic → payload schema. A
   * payload is checked against it before anything is stored.
   */
  events?: Events;
  /**
   * When each run ends as `deadline_exceeded` if it has not ended before: a
   * duration (ms) from its start, or a date; `engine.start(…, { deadline })`
   * overrides it. Its descendants are cancelled with it.
   */
  deadline?: Deadline;
  run: (args: RunArguments<z.output<Input>, Steps, Events>) => Promise<Output extends AnySchema ? z.input<Output> : Result>;
}

/** A workflow definition: one version of one workflow. */
export interface Workflow<
  Input extends AnySchema = AnySchema,
  Result = unknown,
  Steps extends StepDeclarations = StepDeclarations,
  Events extends EventDeclarations = EventDeclarations,
  Name extends string = string,
> {
  readonly kind: 'stepkey.workflow';
  /** Its name, typed as written: the versions an engine registers under one name are told apart by it. */
  readonly name: Name;
  readonly version: number;
  readonly input: Input;
  readonly output: AnySchema | undefined;
  readonly steps: Steps;
  readonly events: Events;
  /** Its runs' deadline, unless a start gives one (see WorkflowOptions.deadline). */
  readonly deadline?: ResolvedDeadline | undefined;
  /** A method, so that a workflow with specific steps is assignable to Workflow (bivariant parameters). */
  run(args: RunArguments<z.output<Input>, Steps, Events>): Promise<unknown>;
  /**
   * A typed ref to one of its runs, from the run's scope and key alone (what a
   * server gets from its client): `engine.send(approval.ref({ scope, key }),
   * 'approved', payload, { key })` checks the event's name and payload by type,
   * and the run's workflow when it is sent.
   */
  ref(ref: KeyRef): RunRef<Workflow<Input, Result, Steps, Events, Name>>;
  /** Type carrier for the result; always undefined at run time. */
  readonly __result?: Result;
}

export type WorkflowInput<W> = W extends Workflow<infer I, unknown, StepDeclarations> ? z.input<I> : never;
export type WorkflowResult<W> = W extends Workflow<AnySchema, infer R, StepDeclarations> ? R : never;
/** The event topics a workflow declares (any string for a workflow not known by type). */
export type EventName<W> = W extends Workflow<AnySchema, unknown, StepDeclarations, infer E> ? keyof E & string : string;
/** What `engine.send` takes for `topic`: its schema's input. */
export type EventInput<W, T> =
  W extends Workflow<AnySchema, unknown, StepDeclarations, infer E> ? (T extends keyof E ? z.input<E[T]> : never) : unknown;

const workflowNamePattern = /^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$/;
const topicPattern = workflowNamePattern;

export function defineWorkflow<
  Input extends AnySchema,
  Steps extends StepDeclarations,
  Result,
  Output extends AnySchema | undefined = undefined,
  Events extends EventDeclarations = Record<never, never>,
  Name extends string = string,
>(
  options: WorkflowOptions<Input, Output, Steps, Result, Events, Name>,
): Workflow<Input, Output extends AnySchema ? z.output<Output> : Result, Steps, Events, Name> {
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
  let deadline: ResolvedDeadline | undefined;
  try {
    deadline = resolveDeadline(options.deadline, where);
  } catch (error) {
    throw new StepkeyError('definition_error', (error as Error).message);
  }
  for (const [topic, schema] of Object.entries(options.events ?? {})) {
    if (!topicPattern.test(topic)) {
      throw new StepkeyError('definition_error', `${where}: event '${topic}' must be named with 1–128 letters, digits or . _ / -.`);
    }
    if (!schema || typeof (schema as { safeParse?: unknown }).safeParse !== 'function') {
      throw new StepkeyError('definition_error', `${where}: events.${topic} must be a zod schema of its payload.`);
    }
  }
  const workflow: Workflow<Input, Output extends AnySchema ? z.output<Output> : Result, Steps, Events, Name> = Object.freeze({
    kind: 'stepkey.workflow' as const,
    name: options.name,
    version: options.version,
    input: options.input,
    output: options.output,
    steps: options.steps ?? ({} as Steps),
    events: options.events ?? ({} as Events),
    deadline,
    run: options.run as (args: RunArguments<z.output<Input>, Steps, Events>) => Promise<unknown>,
    ref: (ref: KeyRef) => refOf(workflow, ref),
  });
  return workflow;
}

/** A run ref carrying its workflow (for the types; engine.send checks the run's workflow by name). */
function refOf<W extends Workflow>(workflow: W, ref: KeyRef): RunRef<W> {
  if (!ref || typeof ref !== 'object') {
    throw new StepkeyError('invalid_key', `${workflow.name}.ref() needs { scope, key }, got ${ref === null ? 'null' : typeof ref}.`);
  }
  return Object.freeze({ scope: ref.scope, key: ref.key, workflow });
}

const limited = new WeakMap<Workflow, boolean>();

/** Whether any step of the workflow takes a limit: its runs may hold limit slots (see src/flow). Read once per definition. */
export function takesLimits(workflow: Workflow): boolean {
  let takes = limited.get(workflow);
  if (takes === undefined) {
    takes = Object.values(workflow.steps).some((declaration) => declaration.limit !== undefined);
    limited.set(workflow, takes);
  }
  return takes;
}
