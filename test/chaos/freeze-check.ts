/**
 * What must go on while the API is frozen (SIGSTOP) for longer than a lease:
 * the work of the other processes, held up neither by its locks (the server
 * ends its sessions left idle inside a transaction) nor by its leases. Read
 * once just after the API stops and once just before it continues, so that
 * any change between the two was made by another process:
 *
 *   due     the sender's runs waiting for events are woken and consume them
 *   taken   runs the frozen API held (under a lease it no longer renews) are
 *           taken over by another process once the lease ran out: one
 *           attempt more. Checked when the API held any.
 *   queued  email jobs (the outbox) due when the API stopped are taken by the
 *           worker: done or attempted. Checked when any was due.
 *
 * Each asks for progress, not for a time: a busy host makes it slower, not
 * absent.
 */
import type postgres from 'postgres';
import { SENDER_SCOPE } from './sender-load.js';

interface RunRow {
  scope: string;
  key: string;
  status: string;
  attempts: number;
  token: string | null;
  lockedUntil: string | null;
}

interface JobRow {
  id: string;
  attempts: number;
}

interface Counts {
  consumed: number;
  completed: number;
  emails: number;
}

export interface FreezeStart extends Counts {
  /** Runs in progress outside the sender's scope: the load's checkouts, executed by the API (or by the worker after a takeover). */
  held: RunRow[];
  /** The email jobs due and not locked. */
  dueJobs: JobRow[];
}

export interface FreezeEnd extends Counts {
  /** The rows of the runs held at the start, as they are now. */
  held: RunRow[];
  /** The jobs due at the start that are still there (a job done is deleted). */
  dueJobs: JobRow[];
}

async function counts(sql: postgres.Sql): Promise<Counts> {
  const [row] = await sql<Counts[]>`
    select (select count(*)::int from stepkey.mailbox where consumed_by is not null) as consumed,
           (select count(*)::int from stepkey.ledger where kind = 'run' and status = 'completed') as completed,
           (select count(*)::int from shop.mailbox) as emails`;
  return row!;
}

/** Read just after the API stopped. */
export async function freezeStart(sql: postgres.Sql): Promise<FreezeStart> {
  const held = await sql<RunRow[]>`
    select scope, key, status, attempts, lease_token::text as token, locked_until::text as "lockedUntil" from stepkey.ledger where kind = 'run' and status = 'in_progress' and scope <> ${SENDER_SCOPE}`;
  const dueJobs = await sql<JobRow[]>`
    select id::text, attempts from graphile_worker.jobs where run_at <= now() and locked_at is null and attempts < max_attempts`;
  return { ...(await counts(sql)), held: [...held], dueJobs: [...dueJobs] };
}

/** Read just before the API continues. */
export async function freezeEnd(sql: postgres.Sql, start: FreezeStart): Promise<FreezeEnd> {
  const held = await sql<RunRow[]>`
    select scope, key, status, attempts, lease_token::text as token, locked_until::text as "lockedUntil" from stepkey.ledger
     where kind = 'run'
       and (scope, key) in (select * from unnest(${start.held.map((run) => run.scope)}::text[], ${start.held.map((run) => run.key)}::text[]))`;
  const dueJobs = await sql<JobRow[]>`
    select id::text, attempts from graphile_worker.jobs where id = any(${start.dueJobs.map((job) => job.id)}::bigint[])`;
  return { ...(await counts(sql)), held: [...held], dueJobs: [...dueJobs] };
}

export interface FreezeVerdict {
  /** One line for the report. */
  summary: string;
  failures: string[];
}

/** What went on during the freeze; `what` names the fault in the failures. */
export function judgeFreeze(start: FreezeStart, end: FreezeEnd, what: string): FreezeVerdict {
  const runNow = new Map(end.held.map((row) => [`${row.scope}\u0000${row.key}`, row]));
  let takenOver = 0;
  let stillHeld = 0;
  for (const run of start.held) {
    const row = runNow.get(`${run.scope}\u0000${run.key}`);
    if (!row) continue;
    if (row.attempts > run.attempts) takenOver += 1;
    // Its lease neither renewed nor taken: the frozen API's. (A live holder's heartbeat moves locked_until.)
    else if (row.status === 'in_progress' && row.token === run.token && row.lockedUntil === run.lockedUntil) stillHeld += 1;
  }
  const frozenHeld = takenOver + stillHeld;
  const jobNow = new Map(end.dueJobs.map((job) => [job.id, job]));
  const jobsTaken = start.dueJobs.filter((job) => (jobNow.get(job.id)?.attempts ?? Infinity) > job.attempts).length;
  const consumed = end.consumed - start.consumed;
  const summary =
    `${consumed} events consumed, ${end.completed - start.completed} runs completed, ${end.emails - start.emails} emails delivered meanwhile; ` +
    `${takenOver} of the ${frozenHeld} runs the API held taken over by another process; ${jobsTaken} of ${start.dueJobs.length} due jobs taken`;
  const failures: string[] = [];
  if (consumed <= 0) failures.push(`no event was consumed while the API was frozen (${what}): due work stood still`);
  if (frozenHeld > 0 && takenOver === 0) failures.push(`none of the ${frozenHeld} runs the frozen API held was taken over while it was frozen (${what})`);
  if (start.dueJobs.length > 0 && jobsTaken === 0) {
    failures.push(`none of the ${start.dueJobs.length} jobs due when the API froze was taken while it was frozen (${what}): queued work stood still`);
  }
  return { summary, failures };
}
