/**
 * The stepkey CLI on runs: the listing (stuck first), cancel and resume.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { appModule, useCli } from '../helpers/cli.js';
import { completedCheckout, failedCheckout, makeInProgress } from '../helpers/cli-fixtures.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { uniqueKey } from '../helpers/ledger.js';
import { gated, refusing, workflows } from '../helpers/scripts/cli-app.js';

const db = useTestDatabase();
const app = appModule('cli-app');
const { cli } = useCli(db);

beforeAll(async () => {
  await db().sql`create table cli_gate (open boolean not null)`;
});

describe('runs', () => {
  it('lists stuck runs first, then failed, running and the rest', async () => {
    const scope = 'runs-list';
    const completed = (await completedCheckout(db(), scope)).key;
    const failed = await failedCheckout(db(), scope);
    const running = (await completedCheckout(db(), scope)).key;
    // 50 minutes of lease left, and one run out 30 minutes ago: what is printed keeps its form for minutes.
    await makeInProgress(db(), scope, running, 50 * 60);
    const stuck = (await completedCheckout(db(), scope)).key;
    await makeInProgress(db(), scope, stuck, -30 * 60);
    const newest = (await completedCheckout(db(), scope)).key;

    const json = (await cli(['runs', '--scope', scope, '--json'])).json();
    expect(json.runs.map((run: { key: string; status: string }) => [run.key, run.status])).toEqual([
      [stuck, 'stuck'],
      [failed, 'failed'],
      [running, 'running'],
      [newest, 'completed'],
      [completed, 'completed'],
    ]);
    expect(json.runs[1]).toMatchObject({ resumable: true, error: { message: expect.stringContaining('mail server down') } });

    const human = await cli(['runs', '--scope', scope]);
    expect(human.code).toBe(0);
    const lines = human.stdout.split('\n');
    expect(lines[0]).toMatch(/^SCOPE\s+KEY\s+WORKFLOW\s+STATUS\s+ATTEMPTS\s+AGE\s+LEASE LEFT \/ LAST ERROR$/);
    expect(lines[1]).toMatch(new RegExp(`^${scope}\\s+${stuck}\\s+cli-checkout@1\\s+stuck\\s+1\\s+.+lease expired 3\\dm \\d\\ds ago$`));
    expect(lines[2]).toMatch(/failed \(resumable\).*mail server down/);
    expect(lines[3]).toMatch(/running.*lease 4\dm \d\ds left/);
    expect(human.stdout).toContain('1 stuck run: no worker has resumed it');

    const onlyStuck = (await cli(['runs', '--status', 'stuck', '--json'])).json();
    expect(onlyStuck.runs.map((run: { key: string }) => run.key)).toEqual([stuck]);
    const limited = (await cli(['runs', '--scope', scope, '--limit', '2', '--workflow', 'cli-checkout', '--json'])).json();
    expect(limited.runs).toHaveLength(2);
    expect((await cli(['runs', '--workflow', 'nothing-like-it'])).stdout).toBe('No runs match.\n');
  });
});

describe('cancel and resume', () => {
  it('resumes a failed run: still failing, then completed, then already completed', async () => {
    const scope = 'resume';
    const key = uniqueKey('gated');
    const engine = testEngine(db(), workflows);
    await expect(engine.run(gated, { scope, key }, { n: 7 })).rejects.toThrow(/gate closed/);
    await engine.shutdown();

    const stillClosed = await cli(['resume', key, '--scope', scope, '--app', app, '--here']);
    expect(stillClosed.code).toBe(1);
    expect(stillClosed.stderr).toMatch(/^stepkey: .*gate closed.*resumable/);

    await db().sql`insert into cli_gate values (true)`;
    const resumed = await cli(['resume', key, '--scope', scope, '--app', app, '--here']);
    expect(resumed.stderr).toBe('');
    expect(resumed.code).toBe(0);
    expect(resumed.stdout).toBe(`Run '${key}' in scope '${scope}' completed: 14\n`);
    const again = await cli(['resume', key, '--scope', scope, '--app', app, '--here', '--json']);
    expect(again.code).toBe(0);
    expect(again.json()).toMatchObject({ state: 'completed', output: 14, replayed: true });
    await db().sql`delete from cli_gate`;
  });

  it('resumes a stuck run (its process died): finished steps replay, the run completes', async () => {
    const scope = 'resume-stuck';
    const { key } = await completedCheckout(db(), scope);
    await makeInProgress(db(), scope, key, -30);
    const resumed = await cli(['resume', key, '--scope', scope, '--app', app, '--here', '--json']);
    expect(resumed.stderr).toBe('');
    expect(resumed.code).toBe(0);
    expect(resumed.json()).toMatchObject({ state: 'completed', replayed: false, output: { paymentId: expect.stringMatching(/^pay_/) } });
    const [row] = await db().sql`select status, attempts from stepkey.ledger where scope = ${scope} and key = ${key}`;
    expect(row).toEqual({ status: 'completed', attempts: 2 });
  });

  it('resume exits 1 for a run that ended with an error, or is executing elsewhere, or is unknown', async () => {
    const scope = 'resume-no';
    const engine = testEngine(db(), workflows);
    const key = uniqueKey('refused');
    await expect(engine.run(refusing, { scope, key }, {})).rejects.toThrow(/refused for good/);
    await engine.shutdown();
    const errored = await cli(['resume', key, '--scope', scope, '--app', app, '--here']);
    expect(errored.code).toBe(1);
    expect(errored.stdout).toContain('ended with an error: refused for good');

    const busy = (await completedCheckout(db(), scope)).key;
    await makeInProgress(db(), scope, busy, 60 * 60);
    const elsewhere = await cli(['resume', busy, '--scope', scope, '--app', app, '--here']);
    expect(elsewhere.code).toBe(1);
    expect(elsewhere.stdout).toMatch(/is executing elsewhere \(its lease ends in .*\); nothing was resumed/);

    const unknown = await cli(['resume', 'nope', '--scope', scope, '--app', app, '--here']);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toBe(`stepkey: No run with key 'nope' in scope '${scope}'.\n`);
  });

  it('without --here, makes a failed run due and a sweeper elsewhere completes it; each action is audited', async () => {
    const scope = 'resume-due';
    const key = uniqueKey('gated');
    const engine = testEngine(db(), workflows);
    await expect(engine.run(gated, { scope, key }, { n: 3 })).rejects.toThrow(/gate closed/);
    await db().sql`insert into cli_gate values (true)`;
    try {
      const due = await cli(['resume', key, '--scope', scope]);
      expect(due.stderr).toBe('');
      expect(due.code).toBe(0);
      expect(due.stdout).toBe(`Run '${key}' in scope '${scope}' (was failed) is due: a worker's sweeper continues it.\n`);
      // This process executed nothing; the engine's sweeper, another "process", takes the run.
      engine.startSweeper();
      await expect.poll(async () => (await engine.get({ scope, key }))?.status).toBe('completed');
      const again = await cli(['resume', key, '--scope', scope, '--json']);
      expect(again.code).toBe(1);
      expect(JSON.parse(again.stderr)).toMatchObject({ error: { code: 'not_resumable' } });
      const audit = await db().sql`
        select action, source, applied, detail, actor from stepkey.audit_log where scope = ${scope} and key = ${key} order by id`;
      expect(audit.map((row) => [row.action, row.source, row.applied, JSON.parse(row.detail).before])).toEqual([
        ['resume', 'cli', true, 'failed'],
        ['resume', 'cli', false, 'completed'],
      ]);
      expect(audit[0]!.actor).toMatch(/^cli:.+@.+/);
    } finally {
      await engine.shutdown();
      await db().sql`delete from cli_gate`;
    }
  });

  it('says why a failed run was not resumed: its key held by another claimant, or its record expired', async () => {
    const scope = 'resume-why';
    const key = await failedCheckout(db(), scope);
    const holder = await db().sql.reserve();
    try {
      // A claimant holds the run's key (a retry of its request taking it, say).
      await holder`begin`;
      await holder`select pg_advisory_xact_lock(hashtextextended(${scope} || chr(31) || ${key}, 0))`;
      const busy = await cli(['resume', key, '--scope', scope]);
      expect(busy.code).toBe(1);
      expect(busy.stderr).toContain(`Run '${key}' in scope '${scope}' was not resumed: another claimant holds its key right now`);
      await holder`rollback`;
    } finally {
      holder.release();
    }
    const audit = await db().sql`select applied, detail from stepkey.audit_log where scope = ${scope} and key = ${key} order by id`;
    expect(audit.map((row) => [row.applied, JSON.parse(row.detail)])).toEqual([[false, { before: 'failed', busy: true }]]);
    // Its retention over: nothing to resume, and the message says so.
    const expired = await failedCheckout(db(), scope);
    await db().sql`update stepkey.ledger set expires_at = now() - interval '1 second' where scope = ${scope} and key = ${expired}`;
    const gone = await cli(['resume', expired, '--scope', scope]);
    expect(gone.code).toBe(1);
    expect(gone.stderr).toContain('was not resumed: its record has expired');
    // Free again: the first is made due.
    const due = await cli(['resume', key, '--scope', scope]);
    expect(due.code).toBe(0);
  });

  it('cancels a failed run once; cancelling again or an unknown key exits 1', async () => {
    const scope = 'cancel';
    const key = uniqueKey('gated');
    const engine = testEngine(db(), workflows);
    await expect(engine.run(gated, { scope, key }, { n: 1 })).rejects.toThrow(/gate closed/);
    await engine.shutdown();

    const cancelled = await cli(['cancel', key, '--scope', scope, '--reason', 'customer asked']);
    expect(cancelled.stderr).toBe('');
    expect(cancelled.code).toBe(0);
    expect(cancelled.stdout).toBe(`Cancelled run '${key}' in scope '${scope}' (was failed): customer asked.\n`);
    const listed = (await cli(['runs', '--scope', scope, '--json'])).json();
    expect(listed.runs[0]).toMatchObject({ key, status: 'cancelled', error: { message: 'customer asked' } });

    const twice = await cli(['cancel', key, '--scope', scope]);
    expect(twice.code).toBe(1);
    const audit = await db().sql`select action, applied, detail from stepkey.audit_log where scope = ${scope} and key = ${key} order by id`;
    expect(audit.map((row) => [row.action, row.applied, JSON.parse(row.detail)])).toEqual([
      ['cancel', true, { reason: 'customer asked', before: 'failed' }],
      ['cancel', false, { reason: 'cancelled', before: 'cancelled' }],
    ]);
    expect(twice.stderr).toMatch(/has already ended \(cancelled\); nothing was cancelled/);
    const unknown = await cli(['cancel', 'nope', '--scope', scope, '--json']);
    expect(unknown.code).toBe(1);
    expect(JSON.parse(unknown.stderr)).toMatchObject({ error: { code: 'not_found', exitCode: 1 } });
  });
});
