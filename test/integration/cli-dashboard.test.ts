/**
 * `stepkey dashboard`: refuses to bind beyond loopback without a token, and
 * serves the dashboard until SIGTERM (then exits 0) — run as its own process.
 */
import { request } from 'node:http';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { spawnScript } from '../../src/testing/child-process.js';
import { useCli } from '../helpers/cli.js';
import { useTestDatabase } from '../helpers/database.js';
import { PATIENCE_MS } from '../helpers/patience.js';

const db = useTestDatabase({ max: 3 });
const { cli } = useCli(db);
const main = join(fileURLToPath(new URL('../..', import.meta.url)), 'src', 'cli', 'main.ts');

/** The status of a GET to `url` naming `host` in its Host header. */
function statusWithHost(url: string, host: string): Promise<number> {
  const target = new URL(url);
  return new Promise((resolve, reject) => {
    const sent = request({ host: target.hostname, port: target.port, path: target.pathname, headers: { host } }, (response) => {
      response.resume();
      response.on('end', () => resolve(response.statusCode ?? 0));
    });
    sent.on('error', reject);
    sent.end();
  });
}

describe('stepkey dashboard', () => {
  it('refuses another address without a token, a short token and a bad port', async () => {
    const open = await cli(['dashboard', '--host', '0.0.0.0']);
    expect(open.code).toBe(2);
    expect(open.stderr).toMatch(/Bound to 0\.0\.0\.0, the dashboard needs an access token/);
    const short = await cli(['dashboard', '--port', '0', '--token', 'short']);
    expect(short.code).toBe(1);
    expect(short.stderr).toMatch(/at least 16 characters/);
    expect((await cli(['dashboard', '--port', '70000'])).code).toBe(2);
    const badHost = await cli(['dashboard', '--port', '0', '--allowed-hosts', 'ops.example.test,not a host']);
    expect(badHost.code).toBe(2);
    expect(badHost.stderr).toMatch(/--allowed-hosts: "not a host" is not a host name/);
  });

  it('answers the addresses it listens on, loopback names and --allowed-hosts, and 403 for any other Host', async () => {
    const child = spawnScript(main, {
      args: ['dashboard', '--port', '0', '--host', '127.0.0.2', '--allowed-hosts', 'ops.example.test,.internal.test', '--database', db().url],
      env: { STEPKEY_DASHBOARD_TOKEN: '' },
    });
    try {
      const url = (await child.waitFor(/stepkey dashboard on (http:\/\/127\.0\.0\.2:\d+\/)/, PATIENCE_MS))[1]!;
      const port = new URL(url).port;
      for (const host of [`127.0.0.2:${port}`, 'localhost', 'ops.example.test', `Ops.Example.Test:${port}`, 'a.internal.test']) {
        expect(await statusWithHost(`${url}api/runs`, host), host).toBe(200);
      }
      for (const host of ['attacker.example', `attacker.example:${port}`, 'example.test', '127.0.0.3']) {
        expect(await statusWithHost(`${url}api/runs`, host), host).toBe(403);
        expect(await statusWithHost(`${url}metrics`, host), host).toBe(403);
      }
      child.kill('SIGTERM');
      expect(await child.exited).toEqual({ code: 0, signal: null });
    } finally {
      child.kill('SIGKILL');
    }
  });

  it('serves read-only without a token, and stops on SIGTERM with exit 0', async () => {
    const child = spawnScript(main, { args: ['dashboard', '--port', '0', '--database', db().url], env: { STEPKEY_DASHBOARD_TOKEN: '' } });
    try {
      const url = (await child.waitFor(/stepkey dashboard on (http:\/\/127\.0\.0\.1:\d+\/) \(read-only: no access token\)/, PATIENCE_MS))[1]!;
      const session = await (await fetch(`${url}api/session`)).json();
      expect(session).toMatchObject({ canRead: true, canAct: false, readOnly: true });
      expect((await fetch(`${url}api/runs`)).status).toBe(200);
      child.kill('SIGTERM');
      expect(await child.exited).toEqual({ code: 0, signal: null });
    } finally {
      child.kill('SIGKILL');
    }
  });
});
