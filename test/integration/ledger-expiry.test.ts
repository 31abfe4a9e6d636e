import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import type { Ledger } from '../../src/ledger/ledger.js';
import { connect } from '../../src/db/connect.js';
import { onCitus, useTestDatabase } from '../helpers/database.js';
import { testLedger, uniqueKey } from '../helpers/ledger.js';

const db = useTestDatabase();
const MINUTE = 60 * 1000;
const HOUR = 60 * MINUTE;

/** A finished step of run `runKey`, as the engine records it. */
async function recordStep(scope: string, runKey: string, key: string) {
  await db().sql`insert into stepkey.steps (scope, key, run_key, name, outcome, outcome_ok, attempts, seq, completed_at)
                 values (${scope}, ${key}, ${runKey}, 'step.v1', '1', true, 1, 0, now())`;
}

async function stepCount(scope: string, runKey: string): Promise<number> {
  const [row] = await db().sql<{ n: number }[]>`select count(*)::int as n from stepkey.steps where scope = ${scope} and run_key = ${runKey}`;
  return row!.n;
}

/** A completed request, under `parentKey` when given (a key claimed under a root). */
async function completed(ledger: Ledger, scope: string, key: string, parentKey?: string) {
  const claim = await ledger.claim({ scope, key, fingerprint: 'fp', parentKey });
  if (claim.state !== 'owned') throw new Error(`expected to own ${key}`);
  await ledger.completeWith(claim.lease, { key });
  return claim.lease;
}

describe('expiry and purge', () => {
  it('treats a completed key as new once its retention has passed', async () => {
    const ledger = testLedger(db(), { retentionMs: 24 * HOUR });
    const key = uniqueKey();
    await completed(ledger, 'acme', key);
    // Minutes before the end of its retention (real time passes too, on a busy host), then past it.
    ledger.clock.advance(24 * HOUR - 5 * MINUTE);
    expect((await ledger.claim({ scope: 'acme', key, fingerprint: 'fp' })).state).toBe('replay');
    ledger.clock.advance(10 * MINUTE);
    // Even a different payload is fine: an expired key is a new request.
    expect(await ledger.claim({ scope: 'acme', key, fingerprint: 'other' })).toMatchObject({
      state: 'owned',
      attempts: 1,
      resumed: false,
    });
  });

  it('forgets the steps of an expired run together with it', async () => {
    const ledger = testLedger(db(), { retentionMs: HOUR });
    const key = uniqueKey('run');
    const run = await ledger.claim({ scope: 'acme', key, fingerprint: 'fp', kind: 'run' });
    if (run.state !== 'owned') throw new Error('expected to own the run');
    await completed(ledger, 'acme', `${key}-child`, key);
    await recordStep('acme', key, `${key}-step`);
    await ledger.completeWith(run.lease, { done: true });
    ledger.clock.advance(HOUR + 1);
    expect((await ledger.claim({ scope: 'acme', key, fingerprint: 'fp', kind: 'run' })).state).toBe('owned');
    expect(await ledger.get({ scope: 'acme', key: `${key}-child` })).toBeUndefined();
    expect(await ledger.get({ scope: 'acme', key: `${key}-step` })).toBeUndefined();
    expect(await stepCount('acme', key)).toBe(0);
  });

  it('never expires an in-progress row, nor the children of an unfinished root', async () => {
    const ledger = testLedger(db(), { retentionMs: HOUR, leaseMs: 10 * MINUTE });
    const key = uniqueKey('long');
    const run = await ledger.claim({ scope: 'acme', key, fingerprint: 'fp', kind: 'run' });
    if (run.state !== 'owned') throw new Error('expected to own the run');
    await completed(ledger, 'acme', `${key}-child`, key);
    await recordStep('acme', key, `${key}-step`);
    for (let i = 0; i < 9; i += 1) {
      ledger.clock.advance(6 * MINUTE);
      expect(await ledger.heartbeat(run.lease)).toBe(true);
      await ledger.purge();
    }
    ledger.clock.advance(48 * HOUR);
    await ledger.purge();
    expect(await ledger.get({ scope: 'acme', key })).toMatchObject({ status: 'in_progress' });
    expect(await ledger.get({ scope: 'acme', key: `${key}-child` })).toMatchObject({ status: 'completed', expiresAt: null });
    expect(await ledger.get({ scope: 'acme', key: `${key}-step` })).toMatchObject({ kind: 'step', parentKey: key, status: 'completed' });
  });

  it('purges only expired rows, in bounded batches', async () => {
    const ledger = testLedger(db(), { retentionMs: HOUR });
    const scope = uniqueKey('scope');
    const old = await Promise.all(Array.from({ length: 5 }, (_, i) => completed(ledger, scope, `old-${i}`)));
    await completed(ledger, scope, 'old-0-child', 'old-0');
    await recordStep(scope, 'old-1', 'old-1-step');
    ledger.clock.advance(HOUR / 2);
    await completed(ledger, scope, 'young');
    const inProgress = await ledger.claim({ scope, key: 'working', fingerprint: 'fp' });
    expect(inProgress.state).toBe('owned');
    ledger.clock.advance(HOUR / 2 + 1);

    const purged = await ledger.purge({ batchSize: 2 });
    expect(purged.roots).toBeGreaterThanOrEqual(old.length);
    expect(purged.children).toBeGreaterThanOrEqual(2);
    const left = await db().sql<{ key: string }[]>`select key from stepkey.key_rows where scope = ${scope} order by key`;
    expect(left.map((row) => row.key)).toEqual(['working', 'young']);
  });

  it.skipIf(onCitus())('purges a batch spread over many scopes in a fixed number of statements (one PostgreSQL)', async () => {
    const statements: string[] = [];
    const counted = Object.assign(connect(db().url, { max: 2, onStatement: (text) => statements.push(text) }), { name: db().name });
    try {
      const ledger = testLedger(counted, { retentionMs: HOUR });
      const tag = uniqueKey('spread');
      for (let i = 0; i < 12; i += 1) await completed(ledger, `${tag}-${i}`, `k-${i}`);
      ledger.clock.advance(HOUR + 1);
      statements.length = 0;
      const purged = await ledger.purge({ batchSize: 100, maxBatches: 1 });
      expect(purged.roots).toBeGreaterThanOrEqual(12);
      // The read across scopes, one delete for the batch, the mailboxes' second look: whatever the number of scopes.
      expect(statements.length).toBeLessThanOrEqual(4);
      const [left] = await db().sql<{ n: number }[]>`select count(*)::int as n from stepkey.key_rows where scope like ${`${tag}-%`}`;
      expect(left!.n).toBe(0);
    } finally {
      await counted.close();
    }
  });

  it('purges past a batch of expired children whose parent is unfinished: they are kept, what expired after them goes', async () => {
    const ledger = testLedger(db(), { retentionMs: HOUR });
    const scope = uniqueKey('kept-kids');
    const parent = `${scope}-parent`;
    await db().sql`
      insert into stepkey.ledger (scope, key, kind, name, fingerprint, status, version, input, lease_token, locked_until)
      values (${scope}, ${parent}, 'run', 'wf', 'fp', 'in_progress', 1, '{}', ${randomUUID()}::uuid, now() + interval '1 hour')`;
    // Three ended children of the unfinished parent, expired before anything else in the batch.
    for (let i = 0; i < 3; i++) {
      await db().sql`
        insert into stepkey.ledger (scope, key, kind, name, fingerprint, status, outcome, outcome_ok, version, input, parent_run, expires_at)
        values (${scope}, ${`${scope}-kid-${i}`}, 'run', 'wf-child', 'fp', 'completed', '1', true, 1, '{}', ${parent}, now() - interval '2 hours')`;
    }
    await completed(ledger, scope, 'later');
    ledger.clock.advance(HOUR + 1);

    // A batch of two: before, it read the two oldest (kept children) every time and purged nothing.
    const purged = await ledger.purge({ batchSize: 2 });
    expect(purged.roots).toBeGreaterThanOrEqual(1);
    const left = await db().sql<{ key: string }[]>`select key from stepkey.ledger where scope = ${scope} order by key`;
    expect(left.map((row) => row.key)).toEqual([`${scope}-kid-0`, `${scope}-kid-1`, `${scope}-kid-2`, parent]);
  });

  it('forgets an expired run without its child run being resumed at that moment, which keeps its steps', async () => {
    const ledger = testLedger(db(), { retentionMs: HOUR });
    const parent = uniqueKey('parent');
    const child = uniqueKey('child');
    await db().sql`
      insert into stepkey.ledger (scope, key, kind, name, fingerprint, status, outcome, outcome_ok, version, input, expires_at)
      values ('acme', ${parent}, 'run', 'wf', 'fp', 'completed', '1', true, 1, '{}', now() - interval '1 minute')`;
    await db().sql`
      insert into stepkey.ledger (scope, key, kind, name, fingerprint, status, version, input, parent_run, expires_at)
      values ('acme', ${child}, 'run', 'wf-child', 'fp', 'failed', 1, '{}', ${parent}, now() + interval '1 hour')`;
    await recordStep('acme', child, `${child}-step`);
    // A resume of the failed child holds its row (it is about to take it back into progress).
    const resuming = await db().sql.reserve();
    try {
      await resuming`begin`;
      await resuming`select 1 from stepkey.ledger where scope = 'acme' and key = ${child} for update`;
      // A new request with the parent's key forgets the expired parent, without waiting for the child:
      // it settles with no statement of this database ever seen waiting for a lock.
      let settled = false;
      const claim = ledger.claim({ scope: 'acme', key: parent, fingerprint: 'fp', kind: 'run' }).finally(() => (settled = true));
      let waited = false;
      while (!settled && !waited) {
        const [row] = await db().sql<{ n: number }[]>`
          select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`;
        waited = row!.n > 0;
        if (!waited) await sleep(10);
      }
      expect(waited ? 'waited for the child' : (await claim).state).toBe('owned');
      await resuming`update stepkey.ledger set status = 'in_progress', lease_token = ${randomUUID()}::uuid, locked_until = now() + interval '1 minute',
                       expires_at = null where scope = 'acme' and key = ${child}`;
      await resuming`commit`;
    } finally {
      resuming.release();
    }
    expect(await ledger.get({ scope: 'acme', key: child })).toMatchObject({ status: 'in_progress' });
    expect(await stepCount('acme', child)).toBe(1);
  });

  it('purges a failed run after its retention too', async () => {
    const ledger = testLedger(db(), { retentionMs: HOUR });
    const key = uniqueKey('failed');
    const run = await ledger.claim({ scope: 'acme', key, fingerprint: 'fp', kind: 'run' });
    if (run.state !== 'owned') throw new Error('expected to own the run');
    await ledger.fail(run.lease, new Error('gave up'));
    ledger.clock.advance(HOUR + 1);
    await ledger.purge();
    expect(await ledger.get({ scope: 'acme', key })).toBeUndefined();
  });
});
