/**
 * `stepkey rerun <key> --scope S --from STEP --key NEW [--force]`: starts a
 * new run, linked to the old one, that takes the steps recorded before STEP
 * from the old run's record and executes the rest. The CLI only starts it:
 * a worker's sweeper executes it.
 */
import { systemClock } from '../../db/clock.js';
import { rerunAction } from '../../actions/rerun-run.js';
import { cliActor } from '../actor.js';
import { requiredFlag } from '../args.js';
import type { Command } from '../context.js';
import { ExitCode } from '../errors.js';

export const rerunCommand: Command = {
  name: 'rerun',
  description: `
Starts a new run under --key (same scope), with the old run's workflow version
and input, linked to the old run (inspect shows both ways). The steps the old
run recorded before --from are taken from its record, not executed again;
--from and everything after it execute (under the new run's keys: a call made
again reaches its callee again). Refused, naming the steps, when a step it
would execute again had a confirmed outside effect — a completed call, an
enqueued message — unless --force. Refused for a run still running or waiting,
and for one whose record has expired. The new run is executed by a worker's
sweeper, not by this command. Recorded in the old run's audit log
(stepkey.audit_log) with the step and the new run's key.`,
  positionals: [{ name: 'key', description: "the old run's key" }],
  options: {
    scope: { type: 'string', value: 'S', description: "the old run's scope (required)" },
    from: { type: 'string', value: 'STEP', description: 'the step to execute again from (required)' },
    key: { type: 'string', value: 'NEW', description: "the new run's key (required)" },
    force: { type: 'boolean', description: 'execute again steps whose outside effects are confirmed' },
  },
  async run(context, parsed) {
    const key = parsed.positionals[0]!;
    const scope = requiredFlag(parsed.values, 'scope', 'rerun', "the old run's scope");
    const from = requiredFlag(parsed.values, 'from', 'rerun', 'the step to execute again from');
    const newKey = requiredFlag(parsed.values, 'key', 'rerun', "the new run's key");
    const force = parsed.values.force === true;
    const started = await context.withPool((database) =>
      rerunAction(database.sql, systemClock, { scope, key }, { from, key: newKey, force }, { leaseMs: 1, dueNow: true }, cliActor()),
    );
    const { plan } = started;
    if (context.json) {
      context.printJson({ scope, key: newKey, rerunOf: key, from, started: started.lease !== undefined, taken: plan.taken, again: plan.again, forced: plan.confirmed });
      return ExitCode.ok;
    }
    if (!started.lease) context.line(`Run '${newKey}' in scope '${scope}' is already this rerun of '${key}'; nothing was started.`);
    else {
      context.line(`Started run '${newKey}' in scope '${scope}', a rerun of '${key}' from step '${from}'; a worker's sweeper executes it.`);
      context.line(`  taken from '${key}': ${plan.taken.length ? plan.taken.join(', ') : 'nothing'}`);
      context.line(`  executed again:     ${plan.again.join(', ')}`);
      if (plan.confirmed.length) context.line(`  forced, will happen again: ${plan.confirmed.map((c) => c.step).join(', ')}`);
    }
    return ExitCode.ok;
  },
};
