/**
 * Rerun from a step: the steps before it come from the old run's record (not
 * executed again), the rest execute; a step with a confirmed outside effect
 * is not executed again unless forced; the old run's version; expired
 * records refused.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Clock } from '../../src/db/clock.js';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import type { Engine } from '../../src/engine/engine.js';
import { runCli } from '../helpers/cli.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { uniqueKey } from '../helpers/ledger.js';
import { LONG_LEASE_MS, PATIENCE_MS } from '../helpers/patience.js';

const db = useTestDatabase();
const engines: Engine[] = [];
afterAll(async () => {
  for (const engine of engines) await engine.close({ timeoutMs: 2_000 });
});

const executed: Record<string, number> = {};
const count = (name: string) => {
  executed[name] = (executed[name] ?? 0) + 1;
};

function order(version: number) {
  return defineWorkflow({
    name: 'rerun-order',
    version,
    input: z.object({ sku: z.string() }),
    steps: {
      reserve: step('reserve.v1', { output: z.object({ reservation: z.string() }) }),
      charge: step('charge.v1', { output: z.object({ paymentId: z.string() }) }),
      ship: step('ship.v1', { output: z.object({ shipment: z.string() }) }),
    },
    async run({ input, steps, ctx }) {
      const { reservation } = await steps.reserve.tx(async () => {
        count(`reserve@${version}`);
        return { reservation: `${input.sku}-${ctx.uuid('reservation')}` };
      });
      const { paymentId } = await steps.charge.call(async ({ key }) => {
        count(`charge@${version}`);
        return { paymentId: `pay-${key.slice(0, 8)}` };
      });
      const { shipment } = await steps.ship.tx(async () => {
        count(`ship@${version}`);
        return { shipment: `ship-v${version}` };
      });
      return { reservation, paymentId, shipment };
    },
  });
}

const v1 = order(1);
const v2 = order(2);

function engineFor(options: Parameters<typeof testEngine>[2] = {}) {
  const engine = testEngine(db(), [v1, v2], options);
  engines.push(engine);
  return engine;
}

describe('rerun from a step', () => {
  it('takes the steps before it from the old record and executes the rest, with the old run version', async () => {
    const engine = engineFor();
    const old = { scope: 'acme', key: uniqueKey('old') };
    const first = await engine.run(v1, old, { sku: 'tea' });
    const before = { ...executed };
    const rerun = await engine.rerun(old, { from: 'ship.v1', key: uniqueKey('rerun') });
    const second = await rerun.result();
    // reserve, its recorded uuid and charge came from the old record; ship ran again, as v1.
    expect(second).toEqual({ reservation: first.reservation, paymentId: first.paymentId, shipment: 'ship-v1' });
    expect(executed['reserve@1']).toBe(before['reserve@1']);
    expect(executed['charge@1']).toBe(before['charge@1']);
    expect(executed['ship@1']).toBe((before['ship@1'] ?? 0) + 1);
    expect(executed['ship@2']).toBeUndefined();
    const info = (await engine.get(rerun))!;
    expect(info.rerunOf).toEqual({ key: old.key, from: 'ship.v1' });
    expect(info.version).toBe(1);
    expect((await engine.get(old))!.reruns).toEqual([rerun.key]);
    const inspected = await runCli(['inspect', old.key, '--scope', old.scope], { databaseUrl: db().url });
    expect(inspected.stdout).toContain(`rerun as   '${rerun.key}'`);
    const inspectedRerun = await runCli(['inspect', rerun.key, '--scope', old.scope], { databaseUrl: db().url });
    expect(inspectedRerun.stdout).toContain(`rerun of   '${old.key}' from step 'ship.v1'`);
  });

  it('refuses to execute again a completed call unless forced, naming it', async () => {
    const engine = engineFor();
    const old = { scope: 'acme', key: uniqueKey('old') };
    await engine.run(v1, old, { sku: 'tea' });
    const before = { ...executed };
    const key = uniqueKey('rerun');
    await expect(engine.rerun(old, { from: 'charge.v1', key })).rejects.toMatchObject({
      code: 'rerun_refused',
      message: expect.stringContaining("'charge.v1' (a completed call)"),
    });
    expect(await engine.get({ scope: old.scope, key })).toBeUndefined();
    const cli = await runCli(['rerun', old.key, '--scope', old.scope, '--from', 'reserve.v1', '--key', key], { databaseUrl: db().url });
    expect(cli.code).toBe(1);
    expect(cli.stderr).toContain("'charge.v1' (a completed call)");
    const forced = await engine.rerun(old, { from: 'charge.v1', key, force: true });
    await forced.result();
    expect(executed['charge@1']).toBe((before['charge@1'] ?? 0) + 1);
    expect(executed['reserve@1']).toBe(before['reserve@1']);
  });

  it('answers "in progress", not "taken", while another claimant holds the new key uncommitted', async () => {
    const engine = engineFor();
    const old = { scope: 'acme', key: uniqueKey('old') };
    await engine.run(v1, old, { sku: 'tea' });
    const key = uniqueKey('rerun-held');
    // An identical rerun (or any start) under the new key, not committed yet: it holds the key's advisory lock.
    const holder = await db().sql.reserve();
    try {
      await holder`begin`;
      await holder`select pg_advisory_xact_lock(hashtextextended(${old.scope} || chr(31) || ${key}, 0))`;
      await expect(engine.rerun(old, { from: 'ship.v1', key })).rejects.toMatchObject({ code: 'in_progress', retryable: true });
      await holder`rollback`;
    } finally {
      holder.release();
    }
    const rerun = await engine.rerun(old, { from: 'ship.v1', key });
    expect(await rerun.result()).toMatchObject({ shipment: 'ship-v1' });
  });

  it('leaves a rerun started by the CLI to a sweeper', async () => {
    const engine = engineFor();
    const old = { scope: 'acme', key: uniqueKey('old') };
    await engine.run(v1, old, { sku: 'tea' });
    const before = { ...executed };
    const key = uniqueKey('cli-rerun');
    const cli = await runCli(['rerun', old.key, '--scope', old.scope, '--from', 'ship.v1', '--key', key, '--json'], { databaseUrl: db().url });
    expect(cli.code, cli.stderr).toBe(0);
    expect(cli.json()).toMatchObject({ started: true, taken: ['reserve.v1', '$uuid[reservation]', 'charge.v1'], again: ['ship.v1'] });
    expect(executed['ship@1']).toBe(before['ship@1']);
    await expect.poll(async () => (await engine.sweep(), (await engine.get({ scope: old.scope, key }))?.status)).toBe('completed');
    expect(executed['ship@1']).toBe((before['ship@1'] ?? 0) + 1);
    expect(executed['charge@1']).toBe(before['charge@1']);
    expect((await engine.get({ scope: old.scope, key }))!.attempts).toBe(1);
  });

  it('executes a rerun it takes over when the same rerun is asked for again after its process died, not after a lease', async () => {
    // No sweep, and a lease far longer than the test waits: only the process that took it over can run it.
    const engine = engineFor({ sweepIntervalMs: 3_600_000, leaseMs: LONG_LEASE_MS });
    const old = { scope: 'acme', key: uniqueKey('old') };
    await engine.run(v1, old, { sku: 'tea' });
    const before = { ...executed };
    const key = uniqueKey('rerun-dead');
    // Started by the CLI (a lease of 1 ms, as if its process died at once), never executed.
    const cli = await runCli(['rerun', old.key, '--scope', old.scope, '--from', 'ship.v1', '--key', key], { databaseUrl: db().url });
    expect(cli.code, cli.stderr).toBe(0);
    const again = await engine.rerun(old, { from: 'ship.v1', key });
    await expect.poll(async () => (await engine.get(again))?.status, { timeout: PATIENCE_MS }).toBe('completed');
    expect(await again.result()).toMatchObject({ shipment: 'ship-v1' });
    expect(executed['ship@1']).toBe((before['ship@1'] ?? 0) + 1);
    // The CLI's start counts no execution: the one here is the first.
    expect((await engine.get(again))!.attempts).toBe(1);
  });

  it('records each rerun in the audit log of the old run — by the engine API and the CLI — and a refused one not at all', async () => {
    const engine = engineFor();
    const old = { scope: 'acme', key: uniqueKey('audited') };
    await engine.run(v1, old, { sku: 'tea' });
    const audit = () =>
      db().sql<{ action: string; actor: string; source: string; applied: boolean; detail: string }[]>`
        select action, actor, source, applied, detail from stepkey.audit_log where scope = ${old.scope} and key = ${old.key} order by id`;
    await expect(engine.rerun(old, { from: 'charge.v1', key: uniqueKey('refused') })).rejects.toMatchObject({ code: 'rerun_refused' });
    await expect(engine.rerun(old, { from: 'pack.v1', key: uniqueKey('refused') })).rejects.toMatchObject({ code: 'invalid_input' });
    expect(await audit()).toEqual([]);

    const first = uniqueKey('audited-rerun');
    await (await engine.rerun(old, { from: 'ship.v1', key: first }, { actor: 'ada@ops', source: 'api' })).result();
    await engine.rerun(old, { from: 'ship.v1', key: first });
    const second = uniqueKey('audited-cli');
    const cli = await runCli(['rerun', old.key, '--scope', old.scope, '--from', 'ship.v1', '--key', second], { databaseUrl: db().url });
    expect(cli.code, cli.stderr).toBe(0);
    const rows = await audit();
    expect(rows.map(({ action, actor, source, applied }) => [action, actor, source, applied])).toEqual([
      ['rerun', 'ada@ops', 'api', true],
      ['rerun', 'app', 'api', false],
      ['rerun', expect.stringMatching(/^cli:/), 'cli', true],
    ]);
    expect(JSON.parse(rows[0]!.detail)).toEqual({ from: 'ship.v1', rerunKey: first, taken: ['reserve.v1', '$uuid[reservation]', 'charge.v1'], again: ['ship.v1'], before: 'completed' });
    expect(JSON.parse(rows[2]!.detail)).toMatchObject({ from: 'ship.v1', rerunKey: second });
    const inspected = await runCli(['inspect', old.key, '--scope', old.scope, '--json'], { databaseUrl: db().url });
    expect(inspected.json().matches[0].audit.map((entry: { action: string }) => entry.action)).toEqual(['rerun', 'rerun', 'rerun']);
    await expect.poll(async () => (await engine.sweep(), (await engine.get({ scope: old.scope, key: second }))?.status), { timeout: PATIENCE_MS }).toBe('completed');
  });

  it('refuses a step the old run did not record, a run still running, and a record that has expired', async () => {
    const clock = new Clock();
    const engine = engineFor({ clock, retentionMs: 600_000 });
    const old = { scope: 'acme', key: uniqueKey('old') };
    await engine.run(v1, old, { sku: 'tea' });
    await expect(engine.rerun(old, { from: 'pack.v1', key: uniqueKey('r') })).rejects.toMatchObject({
      code: 'invalid_input',
      message: expect.stringMatching(/no record of step 'pack.v1'.*recorded: reserve.v1, charge.v1, ship.v1/),
    });
    await expect(engine.rerun(old, { from: 'ship.v1', key: old.key })).rejects.toMatchObject({ code: 'invalid_input' });
    // A rerun uses the old run's version: a process without it starts nothing.
    const v2Only = testEngine(db(), [v2]);
    engines.push(v2Only);
    const orphan = uniqueKey('r');
    await expect(v2Only.rerun(old, { from: 'ship.v1', key: orphan })).rejects.toMatchObject({ code: 'version_not_found' });
    expect(await engine.get({ scope: old.scope, key: orphan })).toBeUndefined();
    clock.advance(1_200_000);
    await expect(engine.rerun(old, { from: 'ship.v1', key: uniqueKey('r') })).rejects.toMatchObject({
      code: 'run_not_found',
      message: expect.stringContaining('has expired'),
    });
    const running = { scope: 'acme', key: uniqueKey('running') };
    await db().sql`insert into stepkey.ledger (scope, key, kind, name, fingerprint, status, lease_token, locked_until, version, input, root_key)
                   values (${running.scope}, ${running.key}, 'run', 'rerun-order', 'fp', 'in_progress', gen_random_uuid(), now() + interval '1 hour', 1, '{"sku":"x"}', 'root')`;
    await expect(engine.rerun(running, { from: 'ship.v1', key: uniqueKey('r') })).rejects.toMatchObject({
      message: expect.stringContaining('is running'),
    });
  });
});
