/** Who the CLI acts as, in the audit log: `cli:user@host`. */
import { hostname, userInfo } from 'node:os';
import type { ActionBy } from '../actions/sql/audit.js';

export function cliActor(): ActionBy {
  let user = 'unknown';
  try {
    user = userInfo().username;
  } catch {
    // No user entry (a container's uid): keep 'unknown'.
  }
  return { actor: `cli:${user}@${hostname()}`, source: 'cli' };
}
