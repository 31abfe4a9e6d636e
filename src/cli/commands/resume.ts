/**
 * `stepkey resume <key> --scope S`: continues a failed run — or one whose
 * process died — in this process, from its last finished step, with the app's
 * registered definition of the run's version, and prints how it ended.
 */
import type { RunAttempt } from '../../workflow/engine.js';
import { Engine } from '../../workflow/engine.js';
import { readRunInfo } from '../../workflow/run-info.js';
import { loadAppModule } from '../app-module.js';
import { requiredFlag } from '../args.js';
import type { Command } from '../context.js';
import { CliFailure, ExitCode } from '../errors.js';
import { formatDuration, truncate } from '../format.js';

export const resumeCommand: Command = {
  name: 'resume',
  summary: 'continue a failed or stuck run here and print its outcome',
  description: `
Resumes the run with this key in this scope in this process: finished steps
replay from the ledger, the rest run. Needs the app module (--app) registering
the run's workflow version. Exit 0 when the run completes (or had completed);
exit 1 when it ends with an error, fails again (it stays resumable), was
cancelled, or is executing elsewhere right now.`,
  positionals: [{ name: 'key', description: "the run's key" }],
  options: {
    scope: { type: 'string', value: 'S', description: "the run's scope (required)" },
  },
  async run(context, parsed) {
    const key = parsed.positionals[0]!;
    const scope = requiredFlag(parsed.values, 'scope', 'resume', "the run's scope");
    const app = await loadAppModule(context, { required: true });
    const attempt = await context.withDatabase(async (database) => {
      const info = await readRunInfo(database.sql, { scope, key });
      if (!info) throw new CliFailure('not_found', `No run with key '${key}' in scope '${scope}'.`);
      const registered = app.workflows.some((workflow) => workflow.name === info.workflow && workflow.version === info.version);
      if (!registered && (info.status === 'running' || info.status === 'failed')) {
        throw new CliFailure(
          'version_not_found',
          `Run '${key}' was started by workflow '${info.workflow}' version ${info.version}, which the app module does not ` +
            'register; nothing was resumed (register that version to resume it).',
        );
      }
      const engine = new Engine({ database, workflows: app.workflows, onError: (error, where) => context.warn(`stepkey: ${where}: ${String(error)}`) });
      try {
        return await engine.resume({ scope, key });
      } finally {
        await engine.close();
      }
    });
    return report(context, scope, key, attempt);
  },
};

function report(context: Parameters<Command['run']>[0], scope: string, key: string, attempt: RunAttempt<unknown>): number {
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
    case 'in_progress':
      context.line(`${name} is executing elsewhere (its lease ends in ${formatDuration(attempt.retryAfterMs)}); nothing was resumed.`);
      break;
    case 'mismatch':
      context.line(`${name} could not be claimed: the key belongs to ${attempt.existing.kind} '${attempt.existing.name ?? '?'}'.`);
      break;
  }
  return code;
}
