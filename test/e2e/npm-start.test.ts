/**
 * A newcomer's first run: `npm start` on a fresh data folder without
 * DATABASE_URL, the printed curl run twice (one order, then a replay),
 * `npm run demo`'s checks, and Ctrl-C (SIGINT) leaving no process behind.
 */
import { execFile, spawn } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { processAlive } from '../../src/embedded/process-alive.js';
import type { RunningApp } from '../../workflows/supervisor/state-file.js';
import { PATIENCE_MS } from '../helpers/patience.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
mkdirSync(join(root, '.stepkey'), { recursive: true });
const dataDir = mkdtempSync(join(root, '.stepkey', 'npm-start-'));
chmodSync(dataDir, 0o755);
const run = promisify(execFile);
const env: NodeJS.ProcessEnv = { ...process.env, STEPKEY_DATA_DIR: dataDir, PORT: '0', PAYMENTS_PORT: '0', DASHBOARD_PORT: '0', STEPKEY_LEASE_MS: '2000' };
delete env.DATABASE_URL;

let npmPid: number | undefined;
afterAll(() => {
  if (npmPid) {
    try {
      process.kill(-npmPid, 'SIGKILL');
    } catch {
      // Stopped already.
    }
  }
  rmSync(dataDir, { recursive: true, force: true });
});

describe('npm start', () => {
  it('serves the shop, replays the printed curl, passes the demo, and stops cleanly on SIGINT', async () => {
    const npm = spawn('npm', ['start'], { cwd: root, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    npmPid = npm.pid;
    let output = '';
    npm.stdout.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
    npm.stderr.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
      npm.once('exit', (code, signal) => resolve({ code, signal })),
    );

    const deadline = Date.now() + 2 * PATIENCE_MS;
    while (!/Ctrl-C stops everything/.test(output)) {
      if (Date.now() > deadline || npm.exitCode !== null) throw new Error(`npm start did not come up:\n${output}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const curl = /(curl -i -X POST[\s\S]*?\}')/.exec(output)?.[1];
    expect(curl, output).toBeDefined();
    // The dashboard, its browser app built if it was missing.
    const dashboardUrl = /dashboard (http:\/\/127\.0\.0\.1:\d+\/)/.exec(output)?.[1];
    expect(dashboardUrl, output).toBeDefined();
    expect((await fetch(dashboardUrl!)).status).toBe(200);
    expect(await (await fetch(`${dashboardUrl}api/session`)).json()).toMatchObject({ canRead: true, tokenConfigured: true });

    const first = (await run('sh', ['-c', curl!])).stdout;
    const second = (await run('sh', ['-c', curl!])).stdout;
    expect(first).toMatch(/^HTTP\/1\.1 200/);
    expect(first).not.toMatch(/idempotent-replayed/i);
    expect(second).toMatch(/^HTTP\/1\.1 200/);
    expect(second).toMatch(/Idempotent-Replayed: true/i);
    const body = (text: string) => text.slice(text.indexOf('\r\n\r\n') + 4);
    expect(body(second)).toBe(body(first));
    expect(JSON.parse(body(first))).toMatchObject({ result: { data: { status: 'paid' } } });

    const demo = await run('npm', ['run', 'demo'], { cwd: root, env, timeout: 2 * PATIENCE_MS });
    expect(demo.stdout).toMatch(/Every key: one order, one charge, one email/);

    // The demo killed the worker; npm start has started (or is starting) another.
    const readState = () => JSON.parse(readFileSync(join(dataDir, 'processes.json'), 'utf8')) as RunningApp;
    await expect.poll(() => processAlive(readState().worker)).toBe(true);
    expect(output).toMatch(/stepkey: worker: exited on SIGKILL; restarting in 0\.5 s/);
    await expect.poll(() => /stepkey: worker: restarted \(pid \d+, restart 1\)/.test(output)).toBe(true);
    const state = readState();
    const postmaster = Number(readFileSync(join(dataDir, 'postgres', 'data', 'postmaster.pid'), 'utf8').split('\n')[0]);
    const pids = [state.supervisor, state.api, state.worker, state.payments, state.postgres!, postmaster];
    expect(pids.filter((pid) => !processAlive(pid)), JSON.stringify({ state, postmaster })).toEqual([]);

    // Ctrl-C: SIGINT to the terminal's foreground group, npm and the supervisor alike.
    process.kill(-npm.pid!, 'SIGINT');
    const exit = await exited;
    // The supervisor exits 0; npm itself reports a Ctrl-C the way it always does (code 0, or its own SIGINT).
    expect(exit.code === 0 || exit.signal === 'SIGINT', JSON.stringify(exit)).toBe(true);
    expect(output).toMatch(/stopping the API[\s\S]*stopping the worker[\s\S]*stopping PostgreSQL[\s\S]*stepkey: stopped/);
    expect(output).not.toMatch(/killing everything now/);
    await expect.poll(() => pids.filter(processAlive)).toEqual([]);
    npmPid = undefined;
  }, 1_800_000);
});
