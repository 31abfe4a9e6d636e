/**
 * The types the README and docs/ promise, checked by `npm run typecheck` (tsc over
 * test/): a change that loosens an inference to `unknown` or `any` fails it.
 * Nothing here runs; the functions are never called.
 */
import { createTRPCClient, httpLink } from '@trpc/client';
import { initTRPC } from '@trpc/server';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { expectTypeOf } from 'vitest';
import { z } from 'zod';
import {
  createEngine,
  dateField,
  defineEffect,
  defineWorkflow,
  Ledger,
  step,
  type DrizzleTx,
  type Engine,
  type RunAttempt,
  type RunHandle,
  type TxSql,
  type WorkflowInput,
  type WorkflowResult,
} from 'stepkey';
import { createIdempotency, createWorkflowRouter, type BypassedIdempotency, type IdempotencyContext, type RunStatusView } from 'stepkey/trpc';
import { idempotencyHeaders, idempotencyLink } from 'stepkey/trpc/client';

const email = defineEffect({
  name: 'types.email',
  payload: z.object({ to: z.string(), orderId: z.number(), at: dateField() }),
  async handler(payload, context) {
    expectTypeOf(payload).toEqualTypeOf<{ to: string; orderId: number; at: Date }>();
    expectTypeOf(context.key).toEqualTypeOf<string>();
    expectTypeOf(context.db).toEqualTypeOf<DrizzleTx>();
    expectTypeOf(context.sql).toEqualTypeOf<TxSql>();
  },
});

const order = defineWorkflow({
  name: 'types.order',
  version: 1,
  input: z.object({ sku: z.string(), quantity: z.number().int().default(1) }),
  output: z.object({ orderId: z.number(), placedAt: dateField() }),
  steps: {
    plain: step('plain.v1'),
    tuned: step('tuned.v1', { retry: { attempts: 3 } }),
    timed: step('timed.v1', { timeoutMs: 5_000, retry: { attempts: 2, initialDelayMs: 10 } }),
    reserve: step('reserve.v1', { output: z.object({ orderId: z.number(), at: dateField() }) }),
    charge: step('charge.v1', { output: z.object({ paymentId: z.string() }), retry: { attempts: 8 } }),
    confirm: step('confirm.v1'),
  },
  async run({ input, steps, ctx }) {
    // The validated input: defaults applied.
    expectTypeOf(input).toEqualTypeOf<{ sku: string; quantity: number }>();
    expectTypeOf(ctx.now('placed')).toEqualTypeOf<Date>();
    expectTypeOf(ctx.uuid('id')).toEqualTypeOf<string>();
    expectTypeOf(ctx.scope).toEqualTypeOf<string>();

    // Without an output schema — with or without other options — a step returns the JSON form of its result.
    const plain = await steps.plain.tx(async () => ({ at: new Date(), n: 1, tags: ['a'] }));
    expectTypeOf(plain).toEqualTypeOf<{ at: string; n: number; tags: string[] }>();
    const tuned = await steps.tuned.call(async ({ key, signal }) => {
      expectTypeOf(key).toEqualTypeOf<string>();
      expectTypeOf(signal).toEqualTypeOf<AbortSignal>();
      return { at: new Date(), ok: true as const };
    });
    expectTypeOf(tuned).toEqualTypeOf<{ at: string; ok: true }>();
    const timed = await steps.timed.tx(async (db, { sql, key, attempt }) => {
      expectTypeOf(db).toEqualTypeOf<DrizzleTx>();
      expectTypeOf(sql).toEqualTypeOf<TxSql>();
      expectTypeOf(key).toEqualTypeOf<string>();
      expectTypeOf(attempt).toEqualTypeOf<number>();
      return 42;
    });
    expectTypeOf(timed).toEqualTypeOf<number>();

    // With an output schema, the function returns its input form and the step its parsed form (a dateField() is a Date).
    const reserved = await steps.reserve.tx(async () => ({ orderId: 7, at: new Date().toISOString() }));
    expectTypeOf(reserved).toEqualTypeOf<{ orderId: number; at: Date }>();
    // @ts-expect-error the function must return what the schema takes
    await steps.reserve.tx(async () => ({ orderId: 'seven', at: new Date() }));
    const { paymentId } = await steps.charge.call(async ({ key, attempt, previous }) => {
      expectTypeOf(attempt).toEqualTypeOf<number>();
      expectTypeOf(previous[0]!.outcome).toEqualTypeOf<'failed' | 'unknown'>();
      return { paymentId: key };
    });
    expectTypeOf(paymentId).toEqualTypeOf<string>();

    // An enqueue step takes the effect's payload (its input form) and returns the message's key.
    const enqueued = await steps.confirm.enqueue(email, { to: 'ada@example.com', orderId: reserved.orderId, at: new Date() });
    expectTypeOf(enqueued).toEqualTypeOf<{ key: string }>();
    // @ts-expect-error the payload is checked against the effect's schema
    await steps.confirm.enqueue(email, { to: 'ada@example.com' });

    return { orderId: reserved.orderId, placedAt: reserved.at };
  },
});

// reconcile returns the step's output (its schema's input form) or undefined.
step('types.reconciled.v1', {
  output: z.object({ paymentId: z.string() }),
  reconcile: async ({ key, previous, scope }) => {
    expectTypeOf(previous[0]!.attempt).toEqualTypeOf<number>();
    expectTypeOf(scope).toEqualTypeOf<string>();
    return key === '' ? undefined : { paymentId: key };
  },
  atMostOnce: true,
});
// @ts-expect-error what reconcile finds must fit the step's schema
step('types.reconciled-wrong.v1', {
  output: z.object({ paymentId: z.string() }),
  reconcile: async () => ({ paymentId: 7 }),
});

// A workflow without an output schema returns what its run returns.
const plainResult = defineWorkflow({
  name: 'types.plain',
  version: 1,
  input: z.object({ n: z.number() }),
  steps: {},
  async run({ input }) {
    return { doubled: input.n * 2, label: 'x' as const };
  },
});

expectTypeOf<WorkflowInput<typeof order>>().toEqualTypeOf<{ sku: string; quantity?: number | undefined }>();
expectTypeOf<WorkflowResult<typeof order>>().toEqualTypeOf<{ orderId: number; placedAt: Date }>();
expectTypeOf<WorkflowResult<typeof plainResult>>().toEqualTypeOf<{ doubled: number; label: 'x' }>();

export async function engineTypes(engine: Engine): Promise<void> {
  const ref = { scope: 'acme', key: 'order-1' };
  // engine.run takes the schema's input type and returns the workflow's result.
  expectTypeOf(await engine.run(order, ref, { sku: 'a' })).toEqualTypeOf<{ orderId: number; placedAt: Date }>();
  // @ts-expect-error the input is checked against the workflow's schema
  await engine.run(order, ref, { sku: 1 });
  expectTypeOf(await engine.start(order, ref, { sku: 'a' })).toEqualTypeOf<RunHandle<{ orderId: number; placedAt: Date }, typeof order>>();
  expectTypeOf(await (await engine.start(plainResult, ref, { n: 1 })).result()).toEqualTypeOf<{ doubled: number; label: 'x' }>();
  const attempt = await engine.attempt(order, ref, { sku: 'a', quantity: 2 });
  expectTypeOf(attempt).toEqualTypeOf<RunAttempt<{ orderId: number; placedAt: Date }>>();
  if (attempt.state === 'completed') expectTypeOf(attempt.output.placedAt).toEqualTypeOf<Date>();
}

// tRPC: ctx.run.output is the workflow's result; ctx.idempotency is what the options allow.
interface Ctx {
  req: IncomingMessage;
  res: ServerResponse;
  tenant: string | null;
}
export function trpcTypes(ledger: Ledger) {
  const engine = createEngine({ database: 'postgres://localhost/none', workflows: [order] });
  const t = initTRPC.context<Ctx>().create();
  const idempotency = createIdempotency<Ctx>({ ledger, engine, scope: (ctx) => ctx.tenant });
  const router = t.router({
    place: t.procedure
      .input(order.input)
      .use(idempotency.workflow(order))
      .mutation(({ ctx }) => {
        expectTypeOf(ctx.run.output).toEqualTypeOf<{ orderId: number; placedAt: Date }>();
        expectTypeOf(ctx.run.replayed).toEqualTypeOf<boolean>();
        return { orderId: ctx.run.output.orderId };
      }),
    cancel: t.procedure
      .input(z.object({ orderId: z.number() }))
      .use(idempotency.procedure())
      .mutation(({ ctx, input }) => {
        expectTypeOf(ctx.idempotency).toEqualTypeOf<IdempotencyContext>();
        expectTypeOf(ctx.idempotency.db).toEqualTypeOf<DrizzleTx>();
        return { cancelled: input.orderId };
      }),
    note: t.procedure
      .input(z.object({ text: z.string() }))
      .use(idempotency.procedure({ mode: 'optional' }))
      .mutation(({ ctx }) => {
        expectTypeOf(ctx.idempotency).toEqualTypeOf<IdempotencyContext | undefined>();
        return null;
      }),
    bestEffort: t.procedure
      .input(z.object({ text: z.string() }))
      .use(idempotency.procedure({ onLedgerDown: 'open' }))
      .mutation(({ ctx }) => {
        expectTypeOf(ctx.idempotency).toEqualTypeOf<IdempotencyContext | BypassedIdempotency>();
        return ctx.idempotency.bypassed;
      }),
    workflows: t.router(createWorkflowRouter(t, idempotency, { order })),
  });

  // The client: the link keys mutations; a key of your own goes in the call's context.
  const client = createTRPCClient<typeof router>({
    links: [idempotencyLink(), httpLink({ url: 'http://localhost/trpc', headers: ({ op }) => idempotencyHeaders(op) })],
  });
  return async () => {
    // Dates cross the wire as JSON strings (no transformer here).
    expectTypeOf(await client.place.mutate({ sku: 'a' }, { context: { idempotencyKey: 'order-1' } })).toEqualTypeOf<{ orderId: number }>();
    expectTypeOf(await client.cancel.mutate({ orderId: 1 })).toEqualTypeOf<{ cancelled: number }>();
    expectTypeOf(await client.workflows.order.start.mutate({ sku: 'a' })).toEqualTypeOf<{ key: string; rootKey: string | null; started: boolean; queued?: boolean }>();
    const status = await client.workflows.order.status.query({ key: 'order-1' });
    expectTypeOf(status?.output).toEqualTypeOf<{ orderId: number; placedAt: string } | undefined>();
    expectTypeOf<RunStatusView<{ orderId: number }>['status']>().toEqualTypeOf<NonNullable<typeof status>['status']>();
  };
}
