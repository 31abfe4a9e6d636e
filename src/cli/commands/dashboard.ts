/**
 * `stepkey dashboard`: serves the web dashboard (stepkey/dashboard) on its
 * own, until SIGTERM or SIGINT. Bound to 127.0.0.1 unless --host says
 * otherwise; bound anywhere else it needs an access token, which then
 * guards reading too. Without a token it is read-only. While anyone may read
 * it, it answers only the Host names it is served under: loopback names,
 * the address it listens on, and --allowed-hosts.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { networkInterfaces } from 'node:os';
import { allowedHostName } from '../../dashboard/host-check.js';
import { isStepkeyError } from '../../errors/stepkey-error.js';
import { loadAppModule } from '../app-module.js';
import { positiveIntFlag, stringFlag } from '../args.js';
import { describeUrl, type Command } from '../context.js';
import { CliFailure, ExitCode, UsageError } from '../errors.js';

const loopback = /^(127(\.\d{1,3}){3}|::1|localhost)$/;

export const dashboardCommand: Command = {
  name: 'dashboard',
  description: `
Serves the dashboard: runs (filtered, paged), each run's steps, a key lookup
("was this charged twice?"), the outbox and the workers, following them live,
and /metrics (with prom-client installed). Actions (cancel, resume, retry a job)
need the access token — --token or STEPKEY_DASHBOARD_TOKEN, at least 16
characters — and are recorded in the audit log; without a token the dashboard
is read-only. Bound to 127.0.0.1 by default; bound to any other address the
token is required, for reading too (and /metrics with it). While anyone may
read it (no token, or bound to a loopback address), it answers only requests
whose Host is localhost, 127.0.0.1, [::1], the address it listens on or one of
--allowed-hosts — any other Host gets 403, which closes DNS rebinding: list
there the names it is reached by (a proxy's, say). It never runs a workflow: a
resumed run is made due for a worker's sweeper. With --app, the key lookup
also shows declared steps a run has not recorded.`,
  positionals: [],
  options: {
    port: { type: 'string', value: 'N', description: 'the port (default 4000; 0 picks a free one)' },
    host: { type: 'string', value: 'ADDR', description: 'the address to bind (default 127.0.0.1)' },
    token: { type: 'string', value: 'TOKEN', description: 'the access token (default STEPKEY_DASHBOARD_TOKEN)' },
    'read-only': { type: 'boolean', description: 'no actions at all, even with the token' },
    'base-path': { type: 'string', value: 'PATH', description: "serve under this path, behind a proxy (default '/')" },
    'allowed-hosts': {
      type: 'string',
      value: 'NAMES',
      description: "more Host names to answer while reads are public, comma-separated ('.example.com': it and its subdomains)",
    },
  },
  async run(context, parsed) {
    const portText = stringFlag(parsed.values, 'port');
    const port = portText === '0' ? 0 : (positiveIntFlag(parsed.values, 'port', 'dashboard') ?? 4000);
    if (port > 65_535) throw new UsageError(`--port must be at most 65535, not ${port}.`, 'dashboard');
    const host = stringFlag(parsed.values, 'host') ?? '127.0.0.1';
    const token = stringFlag(parsed.values, 'token') ?? (context.io.env.STEPKEY_DASHBOARD_TOKEN || undefined);
    const local = loopback.test(host);
    if (!local && token === undefined) {
      throw new UsageError(`Bound to ${host}, the dashboard needs an access token: --token or STEPKEY_DASHBOARD_TOKEN.`, 'dashboard');
    }
    const allowedHosts = [...listenNames(host), ...hostsFlag(stringFlag(parsed.values, 'allowed-hosts'))];
    const url = context.databaseUrl();
    const app = await loadAppModule(context, { required: false });
    const basePath = stringFlag(parsed.values, 'base-path') ?? '/';
    const { createDashboard } = await import('../../dashboard/dashboard.js');
    const dashboard = createDashboard({
      database: url,
      token,
      publicRead: local,
      readOnly: parsed.values['read-only'] === true,
      basePath,
      allowedHosts,
      workflows: app?.workflows ?? [],
      onError: (error, where) => context.warn(`stepkey dashboard: ${where}: ${error instanceof Error ? error.message : String(error)}`),
    });
    const server = createServer(dashboard.node);
    await new Promise<void>((resolve, reject) => {
      server.once('error', (error: NodeJS.ErrnoException) =>
        reject(error.code === 'EADDRINUSE' ? new CliFailure('port_in_use', `Port ${port} on ${host} is in use: pass --port.`) : error),
      );
      server.listen(port, host, () => resolve());
    });
    const bound = server.address() as AddressInfo;
    const shown = `http://${bound.family === 'IPv6' ? `[${bound.address}]` : bound.address}:${bound.port}${basePath === '/' ? '/' : `${basePath.replace(/\/$/, '')}/`}`;
    const mode = parsed.values['read-only'] === true ? 'read-only' : token === undefined ? 'read-only: no access token' : 'actions need the access token';
    if (context.json) context.io.stdout(`${JSON.stringify({ url: shown, readOnly: mode.startsWith('read-only') })}\n`);
    else context.line(`stepkey dashboard on ${shown} (${mode}), reading ${describeUrl(url)}. Stop with Ctrl-C.`);
    await new Promise<void>((resolve) => {
      const stop = () => {
        server.closeAllConnections();
        server.close(() => resolve());
      };
      process.once('SIGTERM', stop);
      process.once('SIGINT', stop);
    });
    await dashboard.close();
    return ExitCode.ok;
  },
};

/** The names a request may give for the address it is bound to: the address, or every interface's for a wildcard. */
function listenNames(host: string): string[] {
  if (host !== '0.0.0.0' && host !== '::' && host !== '[::]') return [host.replace(/^\[(.*)\]$/, '$1')];
  return Object.values(networkInterfaces()).flatMap((addresses) => (addresses ?? []).map((address) => address.address.replace(/%.*$/, '')));
}

function hostsFlag(value: string | undefined): string[] {
  if (value === undefined) return [];
  const names = value.split(',').map((name) => name.trim()).filter(Boolean);
  for (const name of names) {
    try {
      allowedHostName(name, '--allowed-hosts');
    } catch (error) {
      if (isStepkeyError(error)) throw new UsageError(error.message, 'dashboard');
      throw error;
    }
  }
  return names;
}
