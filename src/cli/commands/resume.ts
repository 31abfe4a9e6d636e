/**
 * `stepkey resume <key> --scope S`: makes a failed — or stuck — run due for
 * any worker's sweeper (an audited action; nothing runs here). With --here,
 * continues it in this process instead, from its last finished step, with
 * the app's registered definition of the run's version, and prints how it
 * ended.
 */
import { notResumedBecause, resumeRunAction } from '../../actions/resume-run.js';
import { systemClock } from '../../db/clock.js';
import { isStepkeyError } from '../../errors/stepkey-error.js';
import type { RunAttempt } from '../../engine/engine.js';
import { readRunInfo } from '../../read/run-info.js';
import { cliActor } from '../actor.js';
import { loadAppModule } from '../app-module.js';
import { requiredFlag } from '../args.js';
import type { CliContext, Command } from '../context.js';
import { CliFailure, ExitCode } from '../errors.js';
import { formatDuration, truncate } from '../format.js';

export const resumeCommand: Command = {
  name: 'resume',
  description: `
Makes the run with this key in this scope due: a failed run (its retries ran
out) or a stuck one (its process died) is in progress again with a fresh lease
token and a lease already ended, so the next sweep of any worker continues it
from its last finished step (a failed run on a queue waits for a slot again:
the queue's next dispatch continues it). The action is recorded in the audit log. Exit 0
when the run was made due; exit 1 when it is not failed or stuck (running,
completed, ended with an error, cancelled), unknown, past its retention, or
its key is held by another claimant at that moment (try again).

With --here, the run is continued in this process instead, and the command
waits for it: it needs the app module (--app) registering the run's workflow
version. Exit 0 when the run completes (or had completed); exit 1 when it ends
with an error, fails again (it stays resumable), was cancelled, or is executing
elsewhere right now.`,
  positionals: [{ name: 'key', description: "the run's key" }],
  options: {
    scope: { type: 'string', value: 'S', description: "the run's scope (required)" },
    here: { type: 'boolean', description: 'continue the run in this process and print its outcome' },
  },
  async run(context, parsed) {
    const key = parsed.positionals[0]!;
    const scope = requiredFlag(parsed.values, 'scope', 'resume', "the run's scope");
    if (parsed.values.here === true) return resumeHere(context, scope, key);
    const outcome = await context.withPool(async (database) => {
      await refuseReview(database, scope, key);
      return resumeRunAction(database.sql, systemClock, { scope, key }, cliActor()).catch((error: unknown) => {
        throw isStepkeyError(error, 'run_not_found') ? new CliFailure('not_found', error.message) : error;
      });
    });
    if (!outcome.applied) {
      throw new CliFailure('not_resumable', `Run '${key}' in scope '${scope}' was not resumed: ${notResumedBecause(outcome)}.`);
    }
    if (context.json) context.printJson({ scope, key, due: true, previousStatus: outcome.previous });
    else context.line(`Run '${key}' in scope '${scope}' (was ${outcome.previous}) is due: a worker's sweeper continues it.`);
    return ExitCode.ok;
  },
};

async function resumeHere(context: CliContext, scope: string, key: string): Promise<number> {
  const app = await loadAppModule(context, { required: true });
  const { Engine } = await import('../../engine/engine.js');
  const attempt = await context.withDatabase(async (database) => {
    const info = await readRunInfo(database.sql, { scope, key });
    if (!info) throw new CliFailure('not_found', `No run with key '${key}' in scope '${scope}'.`);
    await refuseReview(database, scope, key);
    const registered = app.workflows.some((workflow) => workflow.name === info.workflow && workflow.version === info.version);
    if (!registered && (info.status === 'running' || info.status === 'failed')) {
      throw new CliFailure(
        'version_not_found',
        `Run '${key}' was started by workflow '${info.workflow}' version ${info.version}, which the app module does not ` +
          'register; nothing was resumed (register that version to resume it).',
      );
    }
    // The same action as without --here (recorded, the run due), then this process takes it.
    await resumeRunAction(database.sql, systemClock, { scope, key }, cliActor());
    const engine = new Engine({ database, workflows: app.workflows, onError: (error, where) => context.warn(`stepkey: ${where}: ${String(error)}`) });
    try {
      return await engine.resume({ scope, key });
    } finally {
      await engine.close();
    }
  });
  return report(context, scope, key, attempt);
}

/** A run that needs review is resolved, not resumed: say how. */
async function refuseReview(database: { sql: Parameters<typeof readRunInfo>[0] }, scope: string, key: string): Promise<void> {
  const info = await readRunInfo(database.sql, { scope, key });
  if (info?.status !== 'needs_review') return;
  throw new CliFailure(
    'needs_review',
    `Run '${key}' needs review at step '${info.wait?.step}': say what the call did with \`stepkey resolve ${key} --scope ${scope} --step ${info.wait?.step} --output JSON\` (or --retry); nothing was resumed.`,
  );
}

function report(context: CliContext, scope: string, key: string, attempt: RunAttempt<unknown>): number {
  const code = attempt.state === 'completed' ? ExitCode.ok : ExitCode.failed;
  if (context.json) {
    context.printJson({ scope, key, ...attempt });
    return code;
  }
  const name = `Run '${key}' in scope '${scope}'`;
  switch (attempt.state) {
    case 'completed':
      context.line(`${name} ${attempt.replayed ? 'had already completed' : 'completed'}: ${truncate(JSON.stringify(attempt.output) ?? '(no value)', 200)}`);
      break;
    case 'errored':
      context.line(`${name} ended with an error: ${attempt.error.message}`);
      break;
    case 'cancelled':
      context.line(`${name} was cancelled: ${attempt.reason.message}`);
      break;
    case 'deadline_exceeded':
      context.line(`${name} did not finish before its deadline; it cannot be resumed (rerun it, with a new deadline).`);
      break;
    case 'waiting':
      context.line(
        attempt.wait.kind === 'slot'
          ? `${name} is back in line on queue '${attempt.wait.for ?? '?'}': a worker that serves the queue continues it when a slot is free.`
          : `${name} is waiting (${attempt.wait.kind} at step '${attempt.wait.step}'); a worker's sweeper continues it when due.`,
      );
      break;
    case 'running':
      context.line(`${name} is executing elsewhere (its lease ends in ${formatDuration(attempt.retryAfterMs)}); nothing was resumed.`);
      break;
    case 'needs_review':
      context.line(
        `${name} needs review: resolve it with \`stepkey resolve ${key} --scope ${scope} --step NAME --output JSON\` (or \`--retry\`); ` +
          `\`stepkey inspect ${key} --scope ${scope}\` names the step. Nothing was resumed.`,
      );
      break;
    case 'mismatch':
      context.line(`${name} could not be claimed: the key belongs to ${attempt.existing.kind} '${attempt.existing.name ?? '?'}'.`);
      break;
  }
  return code;
}
