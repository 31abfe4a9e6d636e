/**
 * `stepkey purge`: forgets what has expired, once — ledger keys with their
 * steps and run metadata, inbox rows, stopped worker pools — in small
 * batches. Workers do the same every minute; this is for cron or by hand.
 */
import { purgeExpired } from '../../worker/purge.js';
import type { Command } from '../context.js';
import { ExitCode } from '../errors.js';
import { plural } from '../format.js';

export const purgeCommand: Command = {
  name: 'purge',
  description: `
Deletes expired ledger keys (with their steps and run metadata), inbox rows
past their retention and stopped worker pools, in batches of 500, and prints
how many of each went. In-progress runs are never purged.`,
  positionals: [],
  options: {},
  async run(context) {
    const result = await context.withPool((database) => purgeExpired(database.sql));
    if (context.json) context.printJson(result);
    else {
      context.line(
        `Purged ${plural(result.keys, 'key')} (${plural(result.steps, 'step')}), ` +
          `${plural(result.inbox, 'inbox row')}, ${plural(result.pools, 'worker pool')}.`,
      );
    }
    return ExitCode.ok;
  },
};
