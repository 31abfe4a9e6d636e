/**
 * The one condition the sweeper and a prompt wake share with flow control: a
 * parked run that is on a queue without holding a slot is not theirs to
 * take, however due it is — only the queue's dispatch starts it (src/lifecycle/dispatch.ts).
 */
import type { Queryable } from '../db/connect.js';

/** SQL: the run of ledger alias `alias` is on a queue and holds no slot. */
export function queuedWithoutSlot(q: Queryable, alias: string) {
  const row = q(alias);
  return q`exists (select 1 from stepkey.queue_entries e
                    where e.scope = ${row}.scope and e.key = ${row}.key and not e.holding)`;
}
