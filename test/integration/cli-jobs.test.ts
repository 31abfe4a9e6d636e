/** `stepkey jobs`: failed outbox jobs are visible, and can be retried by hand. */
import { describe, expect, it } from 'vitest';
import { runCli } from '../helpers/cli.js';
import { useTestDatabase } from '../helpers/database.js';

const db = useTestDatabase();

describe('stepkey jobs', () => {
  it('lists failed jobs first and retries them by id', async () => {
    const [failed] = await db().sql<{ id: string }[]>`
      select id::text from graphile_worker.add_job('cli.notify', '{"k":"k1","s":"acme","p":{}}'::json, max_attempts => 1)`;
    await db().sql`update graphile_worker._private_jobs set attempts = 1, last_error = 'receiver answered 400' where id = ${failed!.id}::bigint`;
    await db().sql`select graphile_worker.add_job('cli.notify', '{"k":"k2","s":"acme","p":{}}'::json)`;

    const listed = await runCli(['jobs', '--json'], { databaseUrl: db().url });
    expect(listed.code).toBe(0);
    const jobs = listed.json<{ jobs: { id: string; status: string; lastError: string | null }[] }>().jobs;
    expect(jobs[0]).toMatchObject({ id: failed!.id, status: 'failed', lastError: 'receiver answered 400' });
    expect(jobs.map((job) => job.status)).toEqual(['failed', 'pending']);

    const human = await runCli(['jobs', '--status', 'failed'], { databaseUrl: db().url });
    expect(human.stdout).toMatch(/failed\s+1\/1\s+—\s+receiver answered 400/);

    const retried = await runCli(['jobs', '--retry', failed!.id], { databaseUrl: db().url });
    expect(retried.code, retried.stderr).toBe(0);
    const [after] = await db().sql`select attempts from graphile_worker.jobs where id = ${failed!.id}::bigint`;
    expect(after!.attempts).toBe(0);

    const unknown = await runCli(['jobs', '--retry', '999999'], { databaseUrl: db().url });
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/Not retried \(unknown or locked\): 999999/);
    expect((await runCli(['jobs', '--status', 'nope'], { databaseUrl: db().url })).code).toBe(2);
  });
});
