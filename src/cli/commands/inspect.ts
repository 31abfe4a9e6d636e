/**
 * `stepkey inspect <key> [--scope S]`: a key and everything derived from it,
 * as a tree — "was I charged twice?" in one command.
 */
import { loadAppModule } from '../app-module.js';
import { stringFlag } from '../args.js';
import type { Command } from '../context.js';
import { CliFailure, ExitCode } from '../errors.js';
import { plural } from '../format.js';
import { inspectionJson, renderInspection } from '../inspect-render.js';
import { readKeyTree } from '../../read/key-tree.js';
import { countScopes } from '../../read/sql/keys-across-scopes.js';

export const inspectCommand: Command = {
  name: 'inspect',
  description: `
Prints the ledger row of the key (a run, an API request, an effect or a step)
with its status, attempts, timings and stored outcome, then each derived key:
the run's steps (and, with --app, declared steps not recorded yet),
or the message an effect key enqueued. Under each derived key it shows
- rows with that key in any other scope of the database ("downstream", e.g. a
  payment service's ledger keyed by the charge step's key: one row there means
  one charge),
- graphile-worker jobs still waiting under that key (pending, retrying, failed),
- inbox rows of consumers that applied the message ("delivered to consumer X").
Without --scope the key is looked up in every scope and each match is printed.
Exit 1 if the key is not found.`,
  positionals: [{ name: 'key', description: 'the key to inspect (a caller key, or a derived step key)' }],
  options: {
    scope: { type: 'string', value: 'S', description: 'the scope of the key (default: search every scope)' },
  },
  async run(context, parsed) {
    const key = parsed.positionals[0]!;
    const scope = stringFlag(parsed.values, 'scope');
    // Only when asked for: reading the database should not wait for the app to load.
    const app = context.flags.app === undefined ? undefined : await loadAppModule(context, { required: true });
    const inspection = await context.withPool(async (database) => {
      const found = await readKeyTree(database.sql, { key, scope }, app?.workflows ?? []);
      if (found.matches.length === 0) {
        const where = scope !== undefined ? `in scope '${scope}'` : `in any of the ${plural(await countScopes(database.sql), 'scope')}`;
        throw new CliFailure('not_found', `No key '${key}' ${where} (it may never have existed, or has expired and been purged).`);
      }
      return found;
    });
    if (context.json) context.printJson({ key, scope: scope ?? null, matches: inspectionJson(inspection) });
    else for (const line of renderInspection(inspection)) context.line(line);
    return ExitCode.ok;
  },
};
