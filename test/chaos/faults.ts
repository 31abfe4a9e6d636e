/**
 * The faults, done to the suite's own cluster: a restart (through the
 * cluster's owner: SIGINT for a fast shutdown, SIGQUIT for an immediate
 * one, then a start on the same port), backends of the app terminated
 * (pg_terminate_backend), and the connection limit held (connections opened
 * until the server refuses one, some of the app's backends terminated so that
 * it must reconnect into a full server, the freed slots taken again).
 */
import postgres from 'postgres';
import type { ChaosCluster } from './cluster.js';
import { maxConnections } from './cluster.js';
import type { Fault } from './plan.js';
import type { Prng } from './prng.js';

export interface FaultDone {
  fault: Fault;
  /** When it began, from the start of the load. */
  startedMs: number;
  endedMs: number;
  detail: string;
}

const appBackends = `
  select pid from pg_stat_activity
   where backend_type = 'client backend' and pid <> pg_backend_pid() and datname = 'shop' and application_name <> 'chaos-checker'
   order by pid`;

async function withAdmin<T>(url: string, work: (sql: postgres.Sql) => Promise<T>): Promise<T> {
  const sql = postgres(url, { max: 1, onnotice: () => {}, connect_timeout: 5, fetch_types: false });
  try {
    return await work(sql);
  } finally {
    await sql.end({ timeout: 1 });
  }
}

/** Terminates `count` of the app's backends, chosen by `random`; returns how many went. */
async function terminate(sql: postgres.Sql, random: Prng, count: number): Promise<number> {
  const pids = (await sql.unsafe<{ pid: number }[]>(appBackends)).map((row) => row.pid);
  const chosen = random.shuffle(pids).slice(0, count);
  let done = 0;
  for (const pid of chosen) {
    const [row] = await sql<{ ok: boolean }[]>`select pg_terminate_backend(${pid}) as ok`;
    if (row?.ok) done += 1;
  }
  return done;
}

/** Opens connections, ten at a time, until the server refuses one (or `maxConnections` are held); returns the refusal. */
async function fill(url: string, held: postgres.Sql[]): Promise<string | undefined> {
  while (held.length < maxConnections) {
    const batch = Array.from({ length: Math.min(10, maxConnections - held.length) }, async () => {
      const sql = postgres(url, { max: 1, onnotice: () => {}, connect_timeout: 5, idle_timeout: 0, fetch_types: false });
      try {
        await sql`select 1`;
        held.push(sql);
        return undefined;
      } catch (error) {
        await sql.end({ timeout: 0 }).catch(() => {});
        return (error as Error).message;
      }
    });
    const refused = (await Promise.all(batch)).find((message) => message !== undefined);
    if (refused !== undefined) return refused;
  }
  return undefined;
}

/** Does one fault; `url` is the cluster's admin URL (its own database, not the shop's). Returns what happened. */
export async function inject(fault: Fault, cluster: ChaosCluster, url: string, random: Prng): Promise<string> {
  switch (fault.kind) {
    case 'restart-fast':
    case 'restart-immediate': {
      const mode = fault.kind === 'restart-fast' ? 'fast' : 'immediate';
      const pid = cluster.postmasterPid();
      const { stopMs, startMs } = await cluster.restart(mode, fault.downMs);
      return `postmaster ${pid} stopped (${mode}, ${stopMs} ms), down ${fault.downMs} ms, up as ${cluster.postmasterPid()} in ${startMs} ms`;
    }
    case 'terminate': {
      const done = await withAdmin(url, (sql) => terminate(sql, random, fault.count));
      return `${done} of the app's backends terminated`;
    }
    case 'connection-limit': {
      const held: postgres.Sql[] = [];
      try {
        const refused = await fill(url, held);
        // One of the held connections does it: the server has no slot for another.
        const terminated = held[0] ? await terminate(held[0], random, 3).catch(() => 0) : 0;
        const until = Date.now() + fault.holdMs;
        let most = held.length;
        while (Date.now() < until) {
          await fill(url, held);
          most = Math.max(most, held.length);
          await new Promise((resolve) => setTimeout(resolve, 200));
        }
        return `${most} connections held for ${fault.holdMs} ms (refused: ${refused ?? 'never'}), ${terminated} app backends terminated meanwhile`;
      } finally {
        await Promise.all(held.map((sql) => sql.end({ timeout: 1 }).catch(() => {})));
      }
    }
  }
}
