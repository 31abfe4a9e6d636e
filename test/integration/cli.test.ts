/**
 * The stepkey CLI in-process: usage errors and help, migrate and purge, and
 * inspect — a run's steps, the downstream row its charge key left in another
 * scope, its job and its inbox row.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import postgres from 'postgres';
import { beforeAll, describe, expect, it } from 'vitest';
import { commands } from '../../src/cli/main.js';
import { childKey } from '../../src/keys/derive.js';
import { storedRoot } from '../helpers/ledger.js';
import { appModule, runCli, useCli } from '../helpers/cli.js';
import { completedCheckout, failedCheckout } from '../helpers/cli-fixtures.js';
import { useEmptyDatabase, useTestDatabase } from '../helpers/database.js';

const db = useTestDatabase();
const app = appModule('cli-app');
const { cli, dir: emptyDir } = useCli(db);

describe('usage', () => {
  it('prints help for stepkey and for every command, exit 0', async () => {
    const top = await cli(['--help']);
    expect(top.code).toBe(0);
    for (const command of commands) {
      expect(top.stdout).toContain(command.name);
      const help = await cli([command.name, '--help']);
      expect(help.code, command.name).toBe(0);
      expect(help.stdout).toContain(`Usage: stepkey ${command.name}`);
      expect(help.stdout).toContain('Exit codes:');
    }
    expect((await cli(['help', 'inspect'])).stdout).toContain('Usage: stepkey inspect <key>');
  });

  it.each([
    [['frobnicate'], /Unknown command 'frobnicate'/],
    [[], /Missing command/],
    [['runs', '--frob'], /Unknown option '--frob'/],
    [['runs', '--limit', 'many'], /--limit must be a whole number/],
    [['runs', '--status', 'sleeping'], /--status must be one of stuck, needs_review, failed, errored, running, waiting, completed, cancelled/],
    [['inspect'], /Missing argument <key>/],
    [['inspect', 'a', 'b'], /Unexpected argument 'b'/],
    [['cancel', 'k'], /Missing --scope/],
    [['resume', 'k', '--scope', 's', '--here'], /needs the app's workflows and effects/],
    [['worker'], /needs the app's workflows and effects/],
    [['check'], /needs the app's workflows and effects/],
    [['inspect', 'k', '--app', 'no/such/module.ts'], /--app: no such file/],
  ])('exits 2 on a usage error: %j', async (argv, message) => {
    const result = await cli(argv);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(message);
    expect(result.stderr.trim().split('\n')).toHaveLength(1);
    expect(result.stdout).toBe('');
  });

  it('loads ./stepkey.config.ts from the working directory when --app is not given', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'stepkey-config-'));
    try {
      await writeFile(join(dir, 'stepkey.config.ts'), `export { workflows, effects } from ${JSON.stringify(app)};\n`);
      const result = await cli(['check', '--write'], { cwd: dir, offline: true });
      expect(result.code).toBe(0);
      expect(result.stdout).toContain('(3 workflows, 3 versions, 6 steps, 2 effects)');
      await writeFile(join(dir, 'broken.ts'), 'export const workflows = [42];\n');
      const broken = await cli(['check', '--app', 'broken.ts'], { cwd: dir, offline: true });
      expect(broken.code).toBe(1);
      expect(broken.stderr).toMatch(/workflows\[0\] is not one of workflows made with defineWorkflow\(\)/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('exits 2 without a database URL, and reports errors as JSON with --json', async () => {
    const plain = await cli(['runs'], { offline: true });
    expect(plain.code).toBe(2);
    expect(plain.stderr).toMatch(/^stepkey: No database: pass --database URL or set DATABASE_URL/);
    const json = await cli(['runs', '--json'], { offline: true });
    expect(JSON.parse(json.stderr)).toMatchObject({ error: { code: 'usage', exitCode: 2 } });
  });

  it('prints the stack only with STEPKEY_DEBUG=1', async () => {
    const quiet = await cli(['inspect', 'nothing-here']);
    expect(quiet.stderr.trim().split('\n')).toHaveLength(1);
    const debug = await cli(['inspect', 'nothing-here'], { env: { STEPKEY_DEBUG: '1' } });
    expect(debug.code).toBe(1);
    expect(debug.stderr).toMatch(/^stepkey: No key 'nothing-here'[^\n]*\nCliFailure: No key[^\n]*\n\s+at /);
  });

  it('exits 1 with one line when the database cannot be reached', async () => {
    const result = await runCli(['purge', '--database', 'postgres://nobody@127.0.0.1:1/none'], { cwd: emptyDir() });
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/^stepkey: Postgres is unavailable/);
    expect(result.stderr.trim().split('\n')).toHaveLength(1);
  });
});

describe('migrate and purge', () => {
  const empty = useEmptyDatabase('climigrate');

  it("migrates a fresh database with the app's migrations, and again without changing anything", async () => {
    const url = await empty();
    const first = await runCli(['migrate', '--database', url, '--app', app], { cwd: emptyDir() });
    expect(first.stderr).toBe('');
    expect(first.code).toBe(0);
    expect(first.stdout).toMatch(/^Migrated postgres:\/\/.*stepkey, graphile_worker, 1 app folder/);
    const sql = postgres(url, { max: 1, onnotice: () => {} });
    try {
      const count = async () => (await sql`select count(*)::int as n from stepkey.__migrations`)[0]!.n as number;
      const applied = await count();
      const again = await runCli(['migrate', '--database', url, '--app', app, '--json'], { cwd: emptyDir() });
      expect(again.code).toBe(0);
      expect(again.json()).toMatchObject({ migrated: true });
      expect(await count()).toBe(applied);
      const schemas = await sql`select schema_name from information_schema.schemata where schema_name in ('stepkey', 'graphile_worker', 'shop') order by 1`;
      expect(schemas.map((row) => row.schema_name)).toEqual(['graphile_worker', 'shop', 'stepkey']);
    } finally {
      await sql.end();
    }
  });

  it('purges once and prints the counts', async () => {
    const human = await cli(['purge']);
    expect(human.code).toBe(0);
    expect(human.stdout).toMatch(/^Purged \d+ keys? \(\d+ steps?\), \d+ inbox rows?, \d+ worker pools?\.\n$/);
    const json = await cli(['purge', '--json']);
    expect(Object.keys(json.json()).sort()).toEqual(['inbox', 'keys', 'pools', 'steps']);
  });
});

describe('inspect', () => {
  it('shows every step of a completed run, the downstream payment row, the pending job and the inbox', async () => {
    const { key, chargeKey, confirmKey } = await completedCheckout(db(), 'inspect-acme');
    await db().sql`insert into stepkey.inbox (consumer, message_key, expires_at)
                   values ('cli.notify', ${confirmKey}, now() + interval '1 day')`;
    const result = await cli(['inspect', key, '--scope', 'inspect-acme']);
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    const out = result.stdout;
    expect(out).toContain(`run '${key}' in scope 'inspect-acme'`);
    expect(out).toContain('cli-checkout@1');
    expect(out).toMatch(/status\s+completed · 1 attempt/);
    expect(out).toContain(`root key   ${await storedRoot(db(), { scope: 'inspect-acme', key })}`);
    expect(out).toMatch(/├─ reserve\.v1\s+completed\s+1 attempt\s+\+\d+ ms\s+"reserved"/);
    expect(out).toMatch(/├─ charge\.v1\s+completed\s+1 attempt/);
    expect(out).toContain(`key ${chargeKey}`);
    expect(out).toMatch(/downstream: scope 'payments\/x'\s+request 'payments.charge'\s+completed\s+1 attempt\s+\{"id":"ch_1","amountCents":500\}/);
    expect(out).toMatch(/└─ confirm\.v1\s+completed/);
    expect(out).toMatch(/job #\d+ 'cli\.notify' pending \(0\/10 attempts\)/);
    expect(out).toContain("delivered to consumer 'cli.notify' at ");

    const json = (await cli(['inspect', key, '--scope', 'inspect-acme', '--json'])).json();
    expect(json.matches).toHaveLength(1);
    const [match] = json.matches;
    expect(match).toMatchObject({ kind: 'run', status: 'completed', workflow: { name: 'cli-checkout', version: 1 } });
    expect(match.items.map((item: { name: string }) => item.name)).toEqual(['reserve.v1', 'charge.v1', 'confirm.v1']);
    const charge = match.items[1];
    expect(charge).toMatchObject({ key: chargeKey, recorded: true, row: { attempts: 1, outcome: { ok: true } } });
    expect(charge.downstream).toEqual([expect.objectContaining({ scope: 'payments/x', key: chargeKey, status: 'completed' })]);
    expect(match.items[2].jobs).toEqual([expect.objectContaining({ task: 'cli.notify', status: 'pending', key: confirmKey })]);
    expect(match.items[2].inbox).toEqual([expect.objectContaining({ consumer: 'cli.notify', messageKey: confirmKey })]);
  });

  it('finds a key in every scope without --scope: a derived key shows the step and the downstream row', async () => {
    const { key, chargeKey } = await completedCheckout(db(), 'inspect-anywhere');
    const byRunKey = (await cli(['inspect', key, '--json'])).json();
    expect(byRunKey.matches.map((m: { scope: string }) => m.scope)).toEqual(['inspect-anywhere']);
    const byChargeKey = await cli(['inspect', chargeKey]);
    expect(byChargeKey.code).toBe(0);
    expect(byChargeKey.stdout).toContain(`step '${chargeKey}' in scope 'inspect-anywhere'`);
    expect(byChargeKey.stdout).toContain(`request '${chargeKey}' in scope 'payments/x'`);
    expect(byChargeKey.stdout).toContain("downstream: scope 'payments/x'");
  });

  it('with the app module, lists declared steps a failed run has not recorded', async () => {
    const key = await failedCheckout(db(), 'inspect-failed');
    const withApp = await cli(['inspect', key, '--scope', 'inspect-failed', '--app', app]);
    expect(withApp.code).toBe(0);
    expect(withApp.stdout).toMatch(/status\s+failed · 1 attempt/);
    expect(withApp.stdout).toMatch(/last error\s+.*mail server down/);
    expect(withApp.stdout).toMatch(/└─ confirm\.v1\s+not recorded/);
    expect(withApp.stdout).toContain(`key ${childKey(await storedRoot(db(), { scope: 'inspect-failed', key }), 'confirm.v1')}`);
    // Without it, the call still shows: its attempts are recorded, each with how it ended.
    const withoutApp = await cli(['inspect', key, '--scope', 'inspect-failed']);
    expect(withoutApp.stdout).toMatch(/└─ confirm\.v1\s+not recorded\s+\d+ attempts?/);
    expect(withoutApp.stdout).toMatch(/attempt 1 \(call\)\s+started \S+\s+ended after .+failed: mail server down/);
  });

  it('exits 1 with a clear message for an unknown key', async () => {
    const scoped = await cli(['inspect', 'no-such-key', '--scope', 'inspect-acme']);
    expect(scoped.code).toBe(1);
    expect(scoped.stderr).toBe("stepkey: No key 'no-such-key' in scope 'inspect-acme' (it may never have existed, or has expired and been purged).\n");
    const anywhere = await cli(['inspect', 'no-such-key']);
    expect(anywhere.code).toBe(1);
    expect(anywhere.stderr).toMatch(/No key 'no-such-key' in any of the \d+ scopes/);
  });
});
