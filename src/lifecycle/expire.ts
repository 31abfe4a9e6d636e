/**
 * Expire: a run whose record has expired is forgotten when its key is
 * claimed again — deleted with everything under it (its steps, attempts,
 * mailbox, queue entry, and its child runs that have ended with their
 * steps) — and the claim goes on as a new request (claim.ts, by
 * take-over.ts's claim paths).
 *
 * The statement is the ledger's (ledger/sql/takeover.ts, forgetExpiredRow):
 * the ledger forgets any expired key with it, below this layer, so it stays
 * there and the lifecycle names it here, the one place a run's claim takes
 * it from.
 *
 * Guarantee: under the key's advisory lock, like a take-over — if another
 * claimant holds it, nothing is deleted (it is reported "in progress"); only
 * a row whose expiry has passed by the database's clock is deleted, and not
 * a child run whose parent has not ended (the parent reads it); a child
 * being resumed right now is skipped. A message sent while the delete waited
 * is deleted by a second statement, from a fresh snapshot, that the same
 * call sends. Every part names the scope.
 */
export { forgetExpiredRow as forgetExpiredRun } from '../ledger/sql/takeover.js';
