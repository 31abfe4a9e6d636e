/**
 * The health probes of `npm start`'s services: the API's HTTP health route,
 * and the worker's pool heartbeat (the row its heartbeat keeps fresh in
 * stepkey.worker_pools, found by the worker's pid: a worker that replaced its
 * graphile-worker runner beats under a new pool id, from the same process).
 */
import { hostname } from 'node:os';
import postgres from 'postgres';
import type { Health } from './supervise.js';

/** Healthy when GET `url` answers 2xx within 2 s. */
export async function httpProbe(url: string): Promise<Health> {
  try {
    const response = await fetch(url, { signal: AbortSignal.timeout(2_000) });
    await response.body?.cancel();
    return response.ok ? 'healthy' : 'unhealthy';
  } catch {
    return 'unhealthy';
  }
}

export interface HeartbeatProbe {
  /** Healthy when a live pool of process `pid` beat within `freshMs`; unknown when the database cannot be read. */
  probe(pid: number): Promise<Health>;
  close(): Promise<void>;
}

export function heartbeatProbe(databaseUrl: string, freshMs = 5_000): HeartbeatProbe {
  const sql = postgres(databaseUrl, { max: 1, connect_timeout: 2, idle_timeout: 30, onnotice: () => {}, connection: { application_name: 'shop-supervisor' } });
  return {
    async probe(pid) {
      try {
        // A beat of this process's pool, recent by the database's clock.
        const [row] = await sql<[{ beating: boolean }]>`
          select coalesce(bool_or(last_beat_at > now() - ${freshMs}::float8 * interval '1 millisecond'), false) as beating
            from stepkey.worker_pools
           where pid = ${pid} and hostname = ${hostname()} and stopped_at is null`;
        return row.beating ? 'healthy' : 'unhealthy';
      } catch {
        return 'unknown';
      }
    },
    close: () => sql.end({ timeout: 1 }),
  };
}
