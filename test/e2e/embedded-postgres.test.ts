import { mkdirSync, mkdtempSync, readFileSync, rmSync, chmodSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import postgres from 'postgres';
import { afterAll, describe, expect, it } from 'vitest';
import { startEmbeddedPostgres } from '../../src/embedded/start-embedded.js';
import { spawnScript } from '../../src/testing/child-process.js';
import { processAlive as alive } from '../../src/embedded/process-alive.js';
import { PATIENCE_MS } from '../helpers/patience.js';

const root = join(fileURLToPath(new URL('../..', import.meta.url)), '.stepkey');
mkdirSync(root, { recursive: true });
const dir = mkdtempSync(join(root, 'pg-e2e-'));
chmodSync(dir, 0o755);
const owner = fileURLToPath(new URL('../helpers/scripts/embedded-owner.ts', import.meta.url));

afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function select1(url: string): Promise<number> {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    return (await sql`select 1 as one`)[0]!.one as number;
  } finally {
    await sql.end();
  }
}

describe('embedded Postgres', () => {
  it('stops Postgres when its owner is killed with SIGKILL', async () => {
    const child = spawnScript(owner, { args: [dir] });
    const [, url] = (await child.waitFor(/URL (\S+)/, PATIENCE_MS)) as unknown as [string, string];
    expect(await select1(url)).toBe(1);
    const postmaster = Number(readFileSync(join(dir, 'data', 'postmaster.pid'), 'utf8').split('\n')[0]);
    child.kill('SIGKILL');
    await child.exited;
    await expect.poll(() => alive(postmaster)).toBe(false);
  });

  it('recovers a cluster whose postmaster outlived its owner process', async () => {
    const child = spawnScript(owner, { args: [dir, '--kill-server-owner'] });
    await child.waitFor(/OWNER KILLED/, PATIENCE_MS);
    const postmaster = Number(readFileSync(join(dir, 'data', 'postmaster.pid'), 'utf8').split('\n')[0]);
    expect(alive(postmaster)).toBe(true);
    child.kill('SIGKILL');
    await child.exited;

    const again = await startEmbeddedPostgres({ dir });
    try {
      expect(alive(postmaster)).toBe(false);
      expect(await select1(again.url)).toBe(1);
    } finally {
      await again.stop();
    }
  });

  it('refuses a cluster that a live owner is using', async () => {
    const first = await startEmbeddedPostgres({ dir });
    try {
      await expect(startEmbeddedPostgres({ dir })).rejects.toThrow(/in use by process/);
    } finally {
      await first.stop();
    }
  });
});
