/**
 * Retries across a deploy. A fingerprint covers the input as the caller sent
 * it, so a deploy that adds a defaulted input field keeps an identical retry
 * identical (a replay, or "in progress" for one in flight — never a 422);
 * keys stored under the previous fingerprint version are compared the way
 * they were computed. A replay is read with the output schema of the version
 * that ran, never another's.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { legacyPurposeFingerprint } from '../../src/keys/fingerprint.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { testLedger, uniqueKey } from '../helpers/ledger.js';

const db = useTestDatabase();

function signup(input: z.ZodType, hold?: Promise<void>) {
  return defineWorkflow({
    name: 'deploy-signup',
    version: 1,
    input,
    steps: { welcome: step('welcome.v1') },
    async run({ input: given, steps }) {
      return steps.welcome.call(async () => {
        await hold;
        return { welcomed: (given as { email: string }).email };
      });
    },
  });
}

const before = z.object({ email: z.string() });
const after = z.object({ email: z.string(), newsletter: z.boolean().default(false) });

describe('a deploy that adds a defaulted input field', () => {
  it('replays an identical retry of a run from before it', async () => {
    const old = testEngine(db(), [signup(before)]);
    const ref = { scope: 'acme', key: uniqueKey('defaulted') };
    await old.run(signup(before), ref, { email: 'ada@example.com' });
    await old.shutdown();
    const deployed = signup(after);
    const fresh = testEngine(db(), [deployed]);
    expect(await fresh.attempt(deployed, ref, { email: 'ada@example.com' })).toMatchObject({ state: 'completed', replayed: true });
    expect(await fresh.attempt(deployed, ref, { email: 'eve@example.com' })).toMatchObject({ state: 'mismatch' });
    await fresh.shutdown();
  });

  it('answers "in progress" to a retry of a run in flight across it, then replays', async () => {
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const old = testEngine(db(), [signup(before, held)]);
    const ref = { scope: 'acme', key: uniqueKey('in-flight') };
    const handle = await old.start(signup(before, held), ref, { email: 'ada@example.com' });
    const deployed = signup(after);
    const fresh = testEngine(db(), [deployed]);
    expect(await fresh.attempt(deployed, ref, { email: 'ada@example.com' })).toMatchObject({ state: 'running' });
    release();
    await handle.result();
    expect(await fresh.attempt(deployed, ref, { email: 'ada@example.com' })).toMatchObject({ state: 'completed', replayed: true });
    await old.shutdown();
    await fresh.shutdown();
  });
});

describe('keys stored under the previous fingerprint version', () => {
  it('are compared the way they were computed: an identical retry replays, another input is a mismatch', async () => {
    const workflow = signup(after);
    const engine = testEngine(db(), [workflow]);
    const ref = { scope: 'acme', key: uniqueKey('v1-fingerprint') };
    await engine.run(workflow, ref, { email: 'ada@example.com' });
    // As stored before fingerprints had versions: over the validated input, defaults applied.
    const v1 = legacyPurposeFingerprint('deploy-signup', { email: 'ada@example.com', newsletter: false });
    await db().sql`update stepkey.ledger set fingerprint = ${v1} where scope = ${ref.scope} and key = ${ref.key}`;
    expect(await engine.attempt(workflow, ref, { email: 'ada@example.com' })).toMatchObject({ state: 'completed', replayed: true });
    expect(await engine.attempt(workflow, ref, { email: 'ada@example.com', newsletter: false })).toMatchObject({ state: 'completed' });
    expect(await engine.attempt(workflow, ref, { email: 'eve@example.com' })).toMatchObject({ state: 'mismatch' });
    await engine.shutdown();
  });

  it('in the ledger’s once: a request stored with a v1 fingerprint replays', async () => {
    const ledger = testLedger(db());
    const request = { scope: 'acme', key: uniqueKey('once-v1'), name: 'orders.cancel' };
    await ledger.once({ ...request, fingerprint: 'f'.repeat(64) }, async () => 'cancelled');
    const replay = await ledger.once(
      { ...request, fingerprint: 'v2:abc', legacyFingerprint: () => 'f'.repeat(64) },
      async () => 'ran again',
    );
    expect(replay).toMatchObject({ state: 'replay', outcome: { body: '"cancelled"' } });
    const other = await ledger.once({ ...request, fingerprint: 'v2:abc', legacyFingerprint: () => 'e'.repeat(64) }, async () => 'x');
    expect(other).toMatchObject({ state: 'mismatch' });
  });
});

describe('a replay after the output schema changed', () => {
  const v1 = defineWorkflow({
    name: 'deploy-order',
    version: 1,
    input: z.object({ sku: z.string() }),
    output: z.object({ orderId: z.number(), legacyCode: z.string() }),
    steps: {},
    async run() {
      return { orderId: 7, legacyCode: 'L-7' };
    },
  });
  const v2 = defineWorkflow({
    name: 'deploy-order',
    version: 2,
    input: z.object({ sku: z.string() }),
    output: z.object({ orderId: z.number(), total: z.number() }),
    steps: {},
    async run() {
      return { orderId: 8, total: 100 };
    },
  });

  it('reads a v1 run with v1’s schema: nothing lost, nothing refused', async () => {
    const ref = { scope: 'acme', key: uniqueKey('schema') };
    const old = testEngine(db(), [v1]);
    await old.run(v1, ref, { sku: 'a' });
    await old.shutdown();
    const both = testEngine(db(), [v1, v2]);
    expect(await both.attempt(v2, ref, { sku: 'a' })).toEqual({
      state: 'completed',
      output: { orderId: 7, legacyCode: 'L-7' },
      replayed: true,
    });
    expect(await both.run(v2, ref, { sku: 'a' })).toEqual({ orderId: 7, legacyCode: 'L-7' });
    await both.shutdown();
  });

  it('refuses to read a run whose version is no longer registered, naming it', async () => {
    const ref = { scope: 'acme', key: uniqueKey('gone') };
    const old = testEngine(db(), [v1]);
    await old.run(v1, ref, { sku: 'a' });
    await old.shutdown();
    const only = testEngine(db(), [v2]);
    const error = await only.attempt(v2, ref, { sku: 'a' }).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'version_not_found' });
    expect((error as Error).message).toMatch(/workflow 'deploy-order' version 1, which this process does not register \(registered: 2\)/);
    await only.shutdown();
  });
});

describe('the sweeper during a deploy', () => {
  const versioned = (version: number, hold?: Promise<void>) =>
    defineWorkflow({
      name: 'deploy-sweep',
      version,
      input: z.object({ n: z.number() }),
      steps: { work: step('work.v1') },
      async run({ input, steps }) {
        return steps.work.call(async () => {
          await hold;
          return { n: input.n, by: version };
        });
      },
    });

  it('leaves a run of a version it does not register to a process that does, instead of failing it', async () => {
    const stalled = new Promise<void>(() => {});
    const newRelease = testEngine(db(), [versioned(2, stalled)]);
    const ref = { scope: 'acme', key: uniqueKey('v2-run') };
    await newRelease.start(versioned(2, stalled), ref, { n: 1 });
    // Its process stalls (no more heartbeats); a process of the old release sweeps after the lease ran out.
    await newRelease.shutdown({ timeoutMs: 1 });
    const oldRelease = testEngine(db(), [versioned(1)]);
    oldRelease.clock.advance(newRelease.leaseMs + 60_000);
    expect(await oldRelease.sweep()).toBe(0);
    const [row] = await db().sql<{ status: string }[]>`select status from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key}`;
    expect(row?.status).toBe('in_progress');
    // A process of the new release takes it and completes it.
    const replacement = testEngine(db(), [versioned(1), versioned(2)]);
    replacement.clock.advance(newRelease.leaseMs + 60_000);
    let taken = 0;
    await expect.poll(async () => (taken += await replacement.sweep())).toBe(1);
    await expect
      .poll(async () => (await db().sql<{ status: string }[]>`select status from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key}`)[0]?.status)
      .toBe('completed');
    await oldRelease.shutdown();
    await replacement.shutdown();
  });
});
