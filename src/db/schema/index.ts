/**
 * stepkey's tables, all in the `stepkey` Postgres schema.
 *
 *   ledger       one row per key: an API request, a workflow run, an effect
 *                (a run's finished steps are in `steps`). Keyed by (scope, key); holds the fingerprint, the
 *                status, the stored outcome (text, so it replays byte for
 *                byte), the lease (locked_until + lease_token) and expiry. A
 *                run's row also holds what it needs to resume: its workflow
 *                (name), version and validated input — written in the same
 *                INSERT as its claim, so a run never exists without them —
 *                and its root key, derived from an identity minted at that
 *                claim, which every step key derives from.
 *   steps        one row per finished step of a run: its derived key, its
 *                run, its name, its stored outcome and its place in the run's
 *                record. Written with the step's own transaction, fenced by
 *                the run's lease (workflow/sql/step-rows.ts).
 *   inbox        consumer-side dedupe: (consumer, message key) of every
 *                applied effect, written in the effect's own transaction.
 *   step_attempts every attempt of a run's outside effects (call and enqueue
 *                steps): started before the call, ended after it, under the
 *                run's lease (see workflow/effects).
 *   worker_pools liveness of worker processes, so that the jobs of a dead one
 *                are unlocked in seconds rather than hours.
 *   audit_log    one row per operator action (cancel, resume, retry a job,
 *                resolve a run that needs review, rerun from a step),
 *                written in the transaction of the change it records.
 *
 * drizzle-kit generates the SQL in drizzle/ from this file. One object is
 * written by hand in its migration (0013) and not declared here: the view
 * `stepkey.key_rows`, every key's row in the ledger's columns (the ledger's
 * own, and each step as the ledger held it before 0013), for the read models.
 */
export { stepkeySchema } from './stepkey-schema.js';
export { ledger } from './ledger.js';
export { steps } from './steps.js';
export { mailbox } from './mailbox.js';
export { stepAttempts } from './step-attempts.js';
export { inbox } from './inbox.js';
export { workerPools } from './worker-pools.js';
export { auditLog } from './audit-log.js';
export { queues, queuePartitions, queueEntries } from './queues.js';
export { limits, limitPartitions, limitSlots } from './limits.js';
