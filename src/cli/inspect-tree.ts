/**
 * What `stepkey inspect` shows, gathered: a key's ledger row, every key
 * derived from it (the run's steps, recorded or still to run; an effect's
 * message), and where each derived key went — rows under that key in any
 * other scope of the database (a payment service's own ledger, keyed by the
 * charge step's key: "was I charged twice?"), graphile-worker jobs still
 * waiting under it, and inbox rows of consumers that applied it.
 */
import type { Queryable } from '../db/connect.js';
import { childKey, rootKey } from '../keys/derive.js';
import { readChildren, readRow, type LedgerRow } from '../ledger/sql/read.js';
import type { Workflow } from '../workflow/define.js';
import { inboxWithKeys, jobsWithKeys, type InboxInfo, type JobInfo } from './sql/deliveries.js';
import { rowsWithKeys } from './sql/keys-across-scopes.js';

export interface DerivedItem {
  /** Step instance name (`charge-card.v1`, `name[id]`, `$now[label]`) or effect name. */
  name: string;
  key: string;
  /** The step's own ledger row, when it has finished (an effect's message has none). */
  row: LedgerRow | undefined;
  /** 'step' (recorded or declared) or 'message' (what an effect key enqueued). */
  kind: 'step' | 'message';
  /** Rows with this key in other scopes. */
  downstream: LedgerRow[];
  jobs: JobInfo[];
  inbox: InboxInfo[];
}

export interface InspectedKey {
  row: LedgerRow;
  rootKey: string;
  workflow: { name: string; version: number } | undefined;
  items: DerivedItem[];
}

export interface Inspection {
  /** The database's now(), in ms, so that leases and expiry read right. */
  nowMs: number;
  matches: InspectedKey[];
}

/** The rows a key names: in one scope, or in every scope when none is given. */
export async function findKey(q: Queryable, key: string, scope: string | undefined): Promise<LedgerRow[]> {
  if (scope !== undefined) {
    const row = await readRow(q, { scope, key });
    return row ? [row] : [];
  }
  return rowsWithKeys(q, [key]);
}

export async function inspectRows(q: Queryable, rows: readonly LedgerRow[], workflows: readonly Workflow[]): Promise<Inspection> {
  const matches = await Promise.all(rows.map((row) => derivedItems(q, row, workflows)));
  const keys = [...new Set(matches.flatMap((match) => match.items.map((item) => item.key)))];
  const [elsewhere, jobs, inbox, now] = await Promise.all([
    rowsWithKeys(q, keys),
    jobsWithKeys(q, keys),
    inboxWithKeys(q, keys),
    q<{ ms: number }[]>`select (extract(epoch from now()) * 1000)::float8 as ms`,
  ]);
  for (const match of matches) {
    for (const item of match.items) {
      item.downstream = elsewhere.filter(
        (other) => other.key === item.key && !(other.scope === match.row.scope && (other.parentKey === match.row.key || other.key === match.row.key)),
      );
      item.jobs = jobs.filter((job) => job.key === item.key);
      item.inbox = inbox.filter((entry) => entry.messageKey === item.key);
    }
  }
  return { nowMs: now[0]?.ms ?? Date.now(), matches };
}

async function derivedItems(q: Queryable, row: LedgerRow, workflows: readonly Workflow[]): Promise<InspectedKey> {
  const root = safeRootKey(row.scope, row.key);
  const item = (name: string, key: string, own: LedgerRow | undefined, kind: DerivedItem['kind']): DerivedItem => ({
    name, key, row: own, kind, downstream: [], jobs: [], inbox: [],
  });
  if (row.kind === 'step') {
    return { row, rootKey: root, workflow: undefined, items: [item(row.name ?? '', row.key, row, 'step')] };
  }
  if (row.kind === 'effect') {
    const items = row.name && root ? [item(row.name, childKey(root, row.name), undefined, 'message')] : [];
    return { row, rootKey: root, workflow: undefined, items };
  }
  const children = await readChildren(q, row);
  const workflow = row.kind === 'run' && row.version !== null ? { name: row.name ?? '', version: row.version } : undefined;
  const items = children.map((child) => item(child.name ?? '', child.key, child, 'step'));
  const definition = workflow && workflows.find((w) => w.name === workflow.name && w.version === workflow.version);
  if (definition && root) {
    // Declared steps not recorded yet: their keys may already have reached a downstream service.
    for (const declared of Object.values(definition.steps)) {
      const recorded = children.some((child) => child.name === declared.name || child.name?.startsWith(`${declared.name}[`));
      if (!recorded) items.push(item(declared.name, childKey(root, declared.name), undefined, 'step'));
    }
  }
  return { row, rootKey: root, workflow, items };
}

/** The root key, or '' for a stored key that today's validation would reject. */
function safeRootKey(scope: string, key: string): string {
  try {
    return rootKey(scope, key);
  } catch {
    return '';
  }
}
