/**
 * `stepkey cancel <key> --scope S`: stops a run at its next step boundary and
 * stores it as cancelled (Engine.cancel). A step in flight either committed
 * before the cancel or not at all; the process running it stops there.
 */
import { cancelRunAction } from '../../actions/cancel-run.js';
import { systemClock } from '../../db/clock.js';
import { isStepkeyError } from '../../errors/stepkey-error.js';
import { cliActor } from '../actor.js';
import { requiredFlag, stringFlag } from '../args.js';
import type { Command } from '../context.js';
import { CliFailure, ExitCode } from '../errors.js';

export const cancelCommand: Command = {
  name: 'cancel',
  description: `
Cancels the run with this key in this scope, if it is in progress, waiting,
needs review, or failed (its retries ran out — an errored run has ended):
it is finished as cancelled with the reason stored as its outcome, and a retry
with the same key replays "cancelled". A process executing the run stops at its
next step boundary. The cancel is recorded in the audit log (stepkey.audit_log).
Cancelling a run that already ended, or a key that is not a run, fails (exit 1).`,
  positionals: [{ name: 'key', description: "the run's key (the caller's idempotency key)" }],
  options: {
    scope: { type: 'string', value: 'S', description: "the run's scope (required)" },
    reason: { type: 'string', value: 'TEXT', description: 'why, stored with the run (default "cancelled")' },
  },
  async run(context, parsed) {
    const key = parsed.positionals[0]!;
    const scope = requiredFlag(parsed.values, 'scope', 'cancel', "the run's scope");
    const reason = stringFlag(parsed.values, 'reason') ?? 'cancelled';
    const ref = { scope, key };
    const { DEFAULT_RETENTION_MS } = await import('../../ledger/ledger.js');
    const outcome = await context.withPool((database) =>
      cancelRunAction(database.sql, systemClock, ref, { reason, retentionMs: DEFAULT_RETENTION_MS, by: cliActor() }).catch((error: unknown) => {
        throw isStepkeyError(error, 'run_not_found') ? new CliFailure('not_found', error.message) : error;
      }),
    );
    if (!outcome.applied) {
      throw new CliFailure('already_ended', `Run '${key}' in scope '${scope}' has already ended (${outcome.previous}); nothing was cancelled.`);
    }
    if (context.json) context.printJson({ scope, key, cancelled: true, previousStatus: outcome.previous, reason });
    else context.line(`Cancelled run '${key}' in scope '${scope}' (was ${outcome.previous}): ${reason}.`);
    return ExitCode.ok;
  },
};
