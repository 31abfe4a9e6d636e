/**
 * `stepkey cancel <key> --scope S`: stops a run at its next step boundary and
 * stores it as cancelled (Engine.cancel). A step in flight either committed
 * before the cancel or not at all; the process running it stops there.
 */
import { readRow } from '../../ledger/sql/read.js';
import { runStatusOf } from '../../workflow/run-info.js';
import { Engine } from '../../workflow/engine.js';
import { requiredFlag, stringFlag } from '../args.js';
import type { Command } from '../context.js';
import { CliFailure, ExitCode } from '../errors.js';

export const cancelCommand: Command = {
  name: 'cancel',
  summary: 'cancel a running or failed run',
  description: `
Cancels the run with this key in this scope, if it is in progress or failed:
it is finished as cancelled with the reason stored as its outcome, and a retry
with the same key replays "cancelled". A process executing the run stops at its
next step boundary. Cancelling a run that already ended, or a key that is not a
run, fails (exit 1).`,
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
    const outcome = await context.withDatabase(async (database) => {
      const row = await readRow(database.sql, ref);
      if (!row) throw new CliFailure('not_found', `No key '${key}' in scope '${scope}'.`);
      if (row.kind !== 'run') {
        throw new CliFailure('not_a_run', `Key '${key}' in scope '${scope}' is a ${row.kind}, not a run; only runs can be cancelled.`);
      }
      const engine = new Engine({ database, workflows: [], onError: (error) => context.warn(String(error)) });
      try {
        const cancelled = await engine.cancel(ref, reason);
        return { cancelled, previous: runStatusOf(row).status };
      } finally {
        await engine.close();
      }
    });
    if (!outcome.cancelled) {
      throw new CliFailure('already_ended', `Run '${key}' in scope '${scope}' has already ended (${outcome.previous}); nothing was cancelled.`);
    }
    if (context.json) context.printJson({ scope, key, cancelled: true, previousStatus: outcome.previous, reason });
    else context.line(`Cancelled run '${key}' in scope '${scope}' (was ${outcome.previous}): ${reason}.`);
    return ExitCode.ok;
  },
};
