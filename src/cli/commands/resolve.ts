/**
 * `stepkey resolve <key> --scope S --step NAME --output JSON | --retry`: an
 * operator's answer to a run that needs review — an at-most-once call whose
 * outcome is unknown. It changes state only (the run is made due); a
 * sweeper (any worker running the run's version) continues it.
 */
import { systemClock } from '../../db/clock.js';
import { WorkflowRegistry } from '../../workflow/registry.js';
import { resolveRunAction } from '../../actions/resolve-run.js';
import { cliActor } from '../actor.js';
import { loadAppModule } from '../app-module.js';
import { requiredFlag, stringFlag } from '../args.js';
import type { Command } from '../context.js';
import { ExitCode, UsageError } from '../errors.js';

export const resolveCommand: Command = {
  name: 'resolve',
  description: `
A run stops as needs_review when an at-most-once call step (atMostOnce: true)
has an attempt whose outcome is unknown: its process died, or the attempt was
cut, after the call may have reached the callee. Find out what the callee did
(\`stepkey inspect <key>\` shows every attempt), then either
  --output JSON   record this as the step's output (checked against the
                  step's schema: needs the app module, --app), or
  --retry         call again.
The run is made due; a worker's sweeper continues it. Recorded in the audit
log (stepkey.audit_log) with the step and the answer. Exit 1 if the run is not
waiting for review at that step.`,
  positionals: [{ name: 'key', description: "the run's key" }],
  options: {
    scope: { type: 'string', value: 'S', description: "the run's scope (required)" },
    step: { type: 'string', value: 'NAME', description: 'the step the run waits at (required; see inspect)' },
    output: { type: 'string', value: 'JSON', description: "the step's output, as JSON" },
    retry: { type: 'boolean', description: 'call the step again instead' },
  },
  async run(context, parsed) {
    const key = parsed.positionals[0]!;
    const scope = requiredFlag(parsed.values, 'scope', 'resolve', "the run's scope");
    const step = requiredFlag(parsed.values, 'step', 'resolve', 'the step the run waits at for review');
    const text = stringFlag(parsed.values, 'output');
    const retry = parsed.values.retry === true;
    if ((text === undefined) === !retry) throw new UsageError('Give exactly one of --output JSON and --retry.', 'resolve');
    let output: unknown;
    if (text !== undefined) {
      try {
        output = JSON.parse(text);
      } catch (error) {
        throw new UsageError(`--output is not JSON: ${(error as Error).message}.`, 'resolve');
      }
    }
    const app = retry ? await loadAppModule(context, { required: false }) : await loadAppModule(context, { required: true });
    const registry = new WorkflowRegistry(app?.workflows ?? []);
    const resolved = await context.withPool((database) =>
      resolveRunAction(database.sql, systemClock, registry, { scope, key }, retry ? { step, retry: true } : { step, output }, cliActor()),
    );
    if (context.json) context.printJson({ scope, key, ...resolved, retry });
    else if (retry) context.line(`Run '${key}' in scope '${scope}': step '${step}' will be called again; a worker's sweeper continues the run.`);
    else context.line(`Run '${key}' in scope '${scope}': step '${step}' resolved with ${resolved.output}; a worker's sweeper continues the run.`);
    return ExitCode.ok;
  },
};
