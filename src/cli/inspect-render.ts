/**
 * Printing an inspection: a tree per matching key for people, or the same
 * data as JSON (full stored values, ISO times) for machines.
 */
import type { LedgerRow } from '../ledger/sql/read.js';
import { runStatusOf } from '../workflow/run-info.js';
import { errorMessage, formatDuration, isoOrNull, plural, relative, summarizeOutcome, truncate } from './format.js';
import type { DerivedItem, InspectedKey, Inspection } from './inspect-tree.js';

/** The status as an operator reads it: a run's view of the row, and "stuck" for a lapsed lease. */
export function displayStatus(row: LedgerRow, nowMs: number): string {
  if (row.status === 'in_progress') return row.lockedUntil !== null && row.lockedUntil <= nowMs ? 'stuck' : 'in_progress';
  if (row.kind === 'run') return runStatusOf(row).status;
  if (row.status === 'completed' && row.outcomeOk === false) return 'completed (error)';
  return row.status;
}

export function renderInspection(inspection: Inspection): string[] {
  const lines: string[] = [];
  inspection.matches.forEach((match, index) => {
    if (index > 0) lines.push('');
    lines.push(...renderMatch(match, inspection.nowMs));
  });
  return lines;
}

function renderMatch(match: InspectedKey, nowMs: number): string[] {
  const { row } = match;
  const lines = [`${row.kind} '${row.key}' in scope '${row.scope}'`];
  const field = (label: string, value: string) => lines.push(`  ${label.padEnd(10)} ${value}`);
  if (match.workflow) field('workflow', `${match.workflow.name}@${match.workflow.version}`);
  else if (row.name) field('name', row.name);
  if (row.kind === 'step' && row.parentKey) field('run', `'${row.parentKey}' (step of that run)`);
  field('status', `${displayStatus(row, nowMs)} · ${plural(row.attempts, 'attempt')}`);
  const took = row.completedAt === null || row.kind === 'step' ? '' : ` · took ${formatDuration(row.completedAt - row.createdAt)}`;
  field('created', `${new Date(row.createdAt).toISOString()} (${relative(row.createdAt - nowMs)})${took}`);
  if (row.status === 'in_progress' && row.lockedUntil !== null) {
    field('lease', row.lockedUntil > nowMs ? `ends ${relative(row.lockedUntil - nowMs)}` : `expired ${relative(row.lockedUntil - nowMs)}`);
  }
  if (row.expiresAt !== null) field('expires', relative(row.expiresAt - nowMs));
  if (match.rootKey && row.kind !== 'step') field('root key', match.rootKey);
  if (row.outcome !== null) field(row.outcomeOk ? 'output' : row.status === 'cancelled' ? 'reason' : 'error', summarizeOutcome(row.outcome, row.outcomeOk, 100).replace(/^error: /, ''));
  if (row.lastError) field('last error', truncate(errorMessage(row.lastError), 100));
  if (row.kind === 'step') {
    // A step is its own derived key: where else it went, without a tree.
    for (const item of match.items) lines.push(...itemDetails(item, nowMs).slice(1).map((detail) => `  ${detail}`));
    return lines;
  }
  if (match.items.length === 0) return lines;
  const title = row.kind === 'effect' ? 'message' : `steps (${match.items.length})`;
  lines.push(`  ${title}`);
  const width = Math.max(...match.items.map((item) => item.name.length));
  match.items.forEach((item, index) => {
    const last = index === match.items.length - 1;
    lines.push(`  ${last ? '└─' : '├─'} ${item.name.padEnd(width)}  ${itemSummary(item, row, nowMs)}`);
    const indent = `  ${last ? '  ' : '│ '}   `;
    lines.push(...itemDetails(item, nowMs).map((detail) => indent + detail));
  });
  return lines;
}

function itemSummary(item: DerivedItem, parent: LedgerRow, nowMs: number): string {
  if (item.kind === 'message') return 'enqueued message';
  const own = item.row;
  if (!own) return 'not recorded (not reached, or in flight)';
  const at = own.completedAt === null ? '' : `  +${formatDuration(own.completedAt - parent.createdAt)}`;
  return `${own.outcomeOk === false ? 'error' : displayStatus(own, nowMs)}  ${plural(own.attempts, 'attempt')}${at}  ${summarizeOutcome(own.outcome, own.outcomeOk)}`;
}

function itemDetails(item: DerivedItem, nowMs: number): string[] {
  const details = [`key ${item.key}`];
  for (const other of item.downstream) {
    details.push(
      `downstream: scope '${other.scope}'  ${other.kind}${other.name ? ` '${other.name}'` : ''}  ` +
        `${displayStatus(other, nowMs)}  ${plural(other.attempts, 'attempt')}  ${summarizeOutcome(other.outcome, other.outcomeOk, 60)}`.trimEnd(),
    );
  }
  for (const job of item.jobs) {
    const error = job.lastError ? `  last error: ${truncate(job.lastError, 60)}` : '';
    details.push(`job #${job.id} '${job.task}' ${job.status} (${job.attempts}/${job.maxAttempts} attempts)${error}`);
  }
  for (const entry of item.inbox) {
    details.push(`delivered to consumer '${entry.consumer}' at ${new Date(entry.processedAt).toISOString()}`);
  }
  return details;
}

export function rowJson(row: LedgerRow, nowMs: number) {
  return {
    scope: row.scope,
    key: row.key,
    kind: row.kind,
    name: row.name,
    status: displayStatus(row, nowMs),
    ledgerStatus: row.status,
    parentKey: row.parentKey,
    fingerprint: row.fingerprint,
    attempts: row.attempts,
    outcome: row.outcome === null ? null : { ok: row.outcomeOk, code: row.outcomeCode, text: row.outcome },
    lastError: row.lastError === null ? null : parseJson(row.lastError),
    createdAt: isoOrNull(row.createdAt),
    updatedAt: isoOrNull(row.updatedAt),
    completedAt: isoOrNull(row.completedAt),
    expiresAt: isoOrNull(row.expiresAt),
    lockedUntil: isoOrNull(row.lockedUntil),
  };
}

export function inspectionJson(inspection: Inspection) {
  return inspection.matches.map((match) => ({
    ...rowJson(match.row, inspection.nowMs),
    rootKey: match.rootKey || null,
    workflow: match.workflow ?? null,
    items: match.items.map((item) => ({
      name: item.name,
      key: item.key,
      kind: item.kind,
      recorded: item.row !== undefined,
      row: item.row ? rowJson(item.row, inspection.nowMs) : null,
      downstream: item.downstream.map((other) => rowJson(other, inspection.nowMs)),
      jobs: item.jobs.map((job) => ({ ...job, runAt: new Date(job.runAt).toISOString() })),
      inbox: item.inbox.map((entry) => ({
        ...entry,
        processedAt: new Date(entry.processedAt).toISOString(),
        expiresAt: new Date(entry.expiresAt).toISOString(),
      })),
    })),
  }));
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
