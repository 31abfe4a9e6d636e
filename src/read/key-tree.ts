/**
 * A key and everything derived from it — what `stepkey inspect`, the
 * dashboard's run page and its key lookup show: the key's ledger row (a run
 * with its input and status), every key derived from it (the run's steps,
 * recorded or still to run; an effect's message), and where each derived key
 * went — rows under that key in any other scope of the database (a payment
 * service's own ledger, keyed by the charge step's key: "was I charged
 * twice?"), graphile-worker jobs still waiting under it, inbox rows of
 * consumers that applied it — and the operator actions taken on the key.
 *
 * Two statements, however many steps: the rows (tree-rows.ts), then where
 * their derived keys went (deliveries.ts) — and, for a run, its effect record
 * (every call attempt), its reruns, its child runs and, on a queue, its
 * place there (queue-places.ts).
 */
import type { Queryable } from '../db/connect.js';
import { childKey, rootKey } from '../keys/derive.js';
import { assertStorableText } from '../keys/validate.js';
import type { LedgerRow } from '../ledger/sql/read.js';
import type { Workflow } from '../workflow/define.js';
import type { RunStatusName } from './run-status.js';
import type { AuditEntry } from './sql/audit.js';
import { whereKeysWent, type InboxInfo, type JobInfo } from './sql/deliveries.js';
import { readTreeRows, type TreeRow } from './sql/tree-rows.js';
import { readChildRuns, type ChildRunInfo } from './sql/child-runs.js';
import type { AttemptRecord } from '../workflow/effects/attempts.js';
import { readAttempts } from '../workflow/effects/sql/read-attempts.js';
import { queuePlace, type QueuePlace } from './sql/queue-places.js';

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
  /** The effect record of a call or an enqueue: every attempt, oldest first. */
  attempts: AttemptRecord[];
  jobs: JobInfo[];
  inbox: InboxInfo[];
}

export interface InspectedKey {
  row: LedgerRow;
  rootKey: string;
  workflow: { name: string; version: number } | undefined;
  /** A run's status as operators see it (run-status.ts); null for other kinds. */
  runStatus: RunStatusName | null;
  /** A run's validated input (JSON text). */
  input: string | null;
  items: DerivedItem[];
  /** Operator actions on this key, newest first. */
  audit: AuditEntry[];
  /** Reruns of this run (their keys, same scope). */
  reruns: string[];
  /** Child runs this run started, oldest first. */
  children: ChildRunInfo[];
  /** A run on a queue: its queue, partition and place in line (queue-places.ts); null otherwise. */
  queue: QueuePlace | null;
}

export interface Inspection {
  /** stepkey's now(), in ms, so that leases and expiry read right. */
  nowMs: number;
  matches: InspectedKey[];
}

export interface KeyQuery {
  key: string;
  /** The key's scope; without one, every scope is searched. */
  scope?: string | undefined;
}

/** The key's tree in one scope, or in every scope that has the key; no matches when it has none. */
export async function readKeyTree(q: Queryable, query: KeyQuery, workflows: readonly Workflow[] = []): Promise<Inspection> {
  assertStorableText(query.key, "The 'key' to look up");
  if (query.scope !== undefined) assertStorableText(query.scope, "The 'scope' to look in");
  const rows = await readTreeRows(q, query);
  const matches = groupMatches(rows);
  await Promise.all(matches.map((found) => addEffectRecord(q, found)));
  for (const found of matches) addUnrecorded(found, workflows);
  const keys = [...new Set(matches.flatMap((match) => match.items.map((item) => item.key)))];
  const went = await whereKeysWent(q, keys, matches.map((match) => ({ scope: match.row.scope, key: match.row.key })));
  for (const match of matches) {
    match.audit = went.audit.filter((entry) => entry.scope === match.row.scope && entry.key === match.row.key);
    for (const item of match.items) {
      item.downstream = went.rows.filter(
        (other) => other.key === item.key && !(other.scope === match.row.scope && (other.parentKey === match.row.key || other.key === match.row.key)),
      );
      item.jobs = went.jobs.filter((job) => job.key === item.key);
      item.inbox = went.inbox.filter((entry) => entry.messageKey === item.key);
    }
  }
  return { nowMs: went.nowMs, matches };
}

function groupMatches(rows: readonly TreeRow[]): InspectedKey[] {
  const matches: InspectedKey[] = [];
  for (const tree of rows) {
    if (tree.depth === 0) {
      matches.push(match(tree));
      continue;
    }
    const parent = matches.find((m) => m.row.scope === tree.matchScope && m.row.key === tree.matchKey);
    parent?.items.push(item(tree.row.name ?? '', tree.row.key, tree.row, 'step'));
  }
  return matches;
}

/**
 * A run's call attempts, under their steps — calls with attempts and no
 * record yet (in flight, interrupted, waiting for review) as items of their
 * own — the runs that rerun it, the child runs it started and its queue place.
 */
async function addEffectRecord(q: Queryable, found: InspectedKey): Promise<void> {
  const { row } = found;
  if (row.kind !== 'run') return;
  const [attempts, reruns, children, place] = await Promise.all([
    readAttempts(q, row),
    q<{ key: string }[]>`select key from stepkey.ledger where scope = ${row.scope} and rerun_of = ${row.key} order by created_at`,
    readChildRuns(q, row),
    // Only a run that has not ended can be on a queue.
    ['waiting', 'in_progress'].includes(row.status) ? queuePlace(q, row) : Promise.resolve(undefined),
  ]);
  found.queue = place ?? null;
  found.reruns = reruns.map((rerun) => rerun.key);
  found.children = children;
  for (const entry of found.items) entry.attempts = attempts.filter((attempt) => attempt.step === entry.name);
  for (const name of new Set(attempts.map((attempt) => attempt.step))) {
    if (found.items.some((entry) => entry.name === name) || !found.rootKey) continue;
    const interrupted = item(name, childKey(found.rootKey, name), undefined, 'step');
    interrupted.attempts = attempts.filter((attempt) => attempt.step === name);
    found.items.push(interrupted);
  }
  // The step a parked run waits at, with no record yet: shown waiting there.
  const waitStep = row.status === 'waiting' && row.waitKind !== 'slot' ? row.waitStep : null;
  if (waitStep && found.rootKey && !found.items.some((entry) => entry.name === waitStep)) {
    found.items.push(item(waitStep, childKey(found.rootKey, waitStep), undefined, 'step'));
  }
}

function match(tree: TreeRow): InspectedKey {
  const { row } = tree;
  const root = row.rootKey ?? legacyRootKey(row.scope, row.key);
  const found: InspectedKey = {
    row,
    rootKey: root,
    workflow: row.kind === 'run' && row.version !== null ? { name: row.name ?? '', version: row.version } : undefined,
    runStatus: tree.runStatus,
    input: tree.input,
    items: [],
    audit: [],
    reruns: [],
    children: [],
    queue: null,
  };
  // A step is its own derived key; an effect key's message derives from it by name.
  if (row.kind === 'step') found.items.push(item(row.name ?? '', row.key, row, 'step'));
  if (row.kind === 'effect' && row.name && root) found.items.push(item(row.name, childKey(root, row.name), undefined, 'message'));
  return found;
}

/** Declared steps a run has not recorded yet: their keys may already have reached a downstream service. */
function addUnrecorded(found: InspectedKey, workflows: readonly Workflow[]): void {
  const { workflow, rootKey: root } = found;
  const definition = workflow && workflows.find((w) => w.name === workflow.name && w.version === workflow.version);
  if (!definition || !root) return;
  const recorded = found.items.map((entry) => entry.name);
  for (const declared of Object.values(definition.steps)) {
    if (recorded.some((name) => name === declared.name || name.startsWith(`${declared.name}[`))) continue;
    found.items.push(item(declared.name, childKey(root, declared.name), undefined, 'step'));
  }
}

function item(name: string, key: string, own: LedgerRow | undefined, kind: DerivedItem['kind']): DerivedItem {
  return { name, key, row: own, kind, downstream: [], attempts: [], jobs: [], inbox: [] };
}

/** The root of a row from before roots were stored, or '' for a stored key that today's validation would reject. */
function legacyRootKey(scope: string, key: string): string {
  try {
    return rootKey(scope, key);
  } catch {
    return '';
  }
}
