/**
 * Printing an inspection: a tree per matching key for people, or the same
 * data as JSON (full stored values, ISO times) for machines.
 */
import type { LedgerRow } from '../ledger/sql/read.js';
import { failedRunErrorId } from '../errors/error-id.js';
import { runStatusOf } from '../lifecycle/states.js';
import { errorLine, errorMessage, formatDuration, isoOrNull, plural, relative, summarizeOutcome, truncate } from './format.js';
import type { AttemptRecord } from '../workflow/effects/attempts.js';
import { attemptInfo, effectSummary } from '../workflow/effects/attempt-view.js';
import type { DerivedItem, InspectedKey, Inspection } from '../read/key-tree.js';
import type { QueuePlace } from '../read/sql/queue-places.js';

/** The status of a row that is not a matched run (whose status comes with it), named as a run's are: "stuck" for a lapsed lease. */
export function displayStatus(row: LedgerRow, nowMs: number): string {
  const { status } = runStatusOf(row);
  return status === 'running' && row.lockedUntil !== null && row.lockedUntil <= nowMs ? 'stuck' : status;
}

function matchStatus(match: InspectedKey, nowMs: number): string {
  return match.runStatus ?? displayStatus(match.row, nowMs);
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
  if (row.rerunOf) field('rerun of', `'${row.rerunOf}' from step '${row.rerunFrom}' (the steps before it taken from that run's record)`);
  if (match.reruns.length) field('rerun as', match.reruns.map((key) => `'${key}'`).join(', '));
  if (row.kind === 'run' && row.parentRun) field('parent', `run '${row.parentRun}' (this run is its child)`);
  field('status', `${matchStatus(match, nowMs)} · ${plural(row.attempts, 'attempt')}`);
  const took = row.completedAt === null || row.kind === 'step' ? '' : ` · took ${formatDuration(row.completedAt - row.createdAt)}`;
  field('created', `${new Date(row.createdAt).toISOString()} (${relative(row.createdAt - nowMs)})${took}`);
  if (row.status === 'in_progress' && row.lockedUntil !== null) {
    field('lease', row.lockedUntil > nowMs ? `ends ${relative(row.lockedUntil - nowMs)}` : `expired ${relative(row.lockedUntil - nowMs)}`);
  }
  if (row.expiresAt !== null) field('expires', relative(row.expiresAt - nowMs));
  if (match.rootKey && row.kind !== 'step') field('root key', match.rootKey);
  if (row.outcome !== null) field(row.outcomeOk ? 'output' : row.status === 'cancelled' || row.status === 'deadline_exceeded' ? 'reason' : 'error', summarizeOutcome(row.outcome, row.outcomeOk, 100).replace(/^error: /, ''));
  if (row.lastError) field('last error', truncate(errorLine(row.lastError), 140));
  const errorId = failedErrorId(row);
  if (errorId) field('error id', `${errorId} (what its callers were answered; the log line with this id has the error)`);
  if (match.queue) field('queue', queueLine(match.queue, nowMs));
  if (row.kind === 'run' && row.status === 'waiting' && row.waitKind === 'review' && row.waitStep) {
    field('review', `step '${row.waitStep}': an at-most-once call's outcome is unknown — stepkey resolve ${row.key} --scope ${row.scope} --step ${row.waitStep} --output JSON (or --retry)`);
  }
  if (row.kind === 'run' && row.status === 'waiting' && row.waitKind === 'limit' && row.waitStep) {
    field('waits for', `step limit '${row.waitFor}' at step '${row.waitStep}' (a token or a slot; it holds no lease meanwhile)`);
  } else if (row.kind === 'run' && row.status === 'waiting' && row.waitKind !== 'review' && row.waitStep) {
    field('waits', `at step '${row.waitStep}': ${waitingLine(row, nowMs)}`);
  }
  if (match.children.length) {
    lines.push(`  child runs (${match.children.length})`);
    const width = Math.max(...match.children.map((child) => child.key.length));
    match.children.forEach((child, index) => {
      const branch = index === match.children.length - 1 ? '└─' : '├─';
      const version = child.version === null ? '' : `@${child.version}`;
      lines.push(`  ${branch} ${child.key.padEnd(width)}  ${child.workflow}${version} · ${child.runStatus.replace('_', ' ')} · ${plural(child.attempts, 'attempt')}`);
    });
  }
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

/** `'reports' partition 'acme' · priority 0 · #3 of 12 waiting in its partition (40 in the queue)`, or `holds a slot`. */
export function queueLine(place: QueuePlace, nowMs: number): string {
  const partition = place.partition === '' ? '' : ` partition '${place.partition}'`;
  const where = `'${place.queue}'${partition} · priority ${place.priority}`;
  if (place.holding || place.position === null) return `${where} · holds a slot`;
  const line = place.partition === '' ? 'in the queue' : `in its partition (${place.queueWaiting} in the queue)`;
  const delayed = place.notBefore > nowMs ? ` · not before ${relative(place.notBefore - nowMs)}` : '';
  return `${where} · #${place.position} of ${place.partitionWaiting} waiting ${line}${delayed}`;
}

/** The step a parked run waits at: what it waits for, and when any sweeper may take the run. */
function waitingLine(run: LedgerRow, nowMs: number): string {
  const what = run.waitKind === 'event' ? `event '${run.waitFor}'` : run.waitKind === 'child' ? `child run '${run.waitFor}'` : run.waitFor ? `${run.waitKind} '${run.waitFor}'` : (run.waitKind ?? 'something');
  const due = run.wakeAt === null ? 'until something wakes it' : run.wakeAt <= nowMs ? 'due now' : `due ${relative(run.wakeAt - nowMs)}`;
  return `waiting for ${what} · ${due} · parked ${relative(run.updatedAt - nowMs)}`;
}

function itemSummary(item: DerivedItem, parent: LedgerRow, nowMs: number): string {
  if (item.kind === 'message') return 'enqueued message';
  const own = item.row;
  if (!own && item.attempts.length > 0) {
    const effect = effectSummary(item.attempts)!;
    return `not recorded  ${plural(effect.started, 'attempt')}${effect.unknown ? ` (${effect.unknown} unknown)` : ''}`;
  }
  if (!own && parent.status === 'waiting' && parent.waitStep === item.name) return waitingLine(parent, nowMs);
  if (!own) return 'not recorded (not reached, or in flight)';
  const at = own.completedAt === null ? '' : `  +${formatDuration(own.completedAt - parent.createdAt)}`;
  return `${own.outcomeOk === false ? 'error' : displayStatus(own, nowMs)}  ${plural(own.attempts, 'attempt')}${at}  ${summarizeOutcome(own.outcome, own.outcomeOk)}`;
}

function itemDetails(item: DerivedItem, nowMs: number): string[] {
  const details = [`key ${item.key}`, ...attemptLines(item.attempts)];
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

/** Each attempt of a call or an enqueue, and what an interrupted call may have done. */
function attemptLines(records: readonly AttemptRecord[]): string[] {
  const lines = records.map((record) => {
    const info = attemptInfo(record);
    const ended =
      info.endedAt === null
        ? 'no end recorded'
        : `ended after ${formatDuration(info.durationMs ?? 0)}`;
    const outcome =
      info.outcome === 'ok'
        ? 'ok'
        : info.outcome === 'failed'
          ? `failed: ${truncate(errorLine(record.error), 80)}`
          : info.endedAt === null
            ? 'unknown (its process died or lost its lease mid-call)'
            : `unknown (cut: ${truncate(errorLine(record.error), 60)})`;
    const settled =
      info.resolution === 'reconciled'
        ? ` → reconciled: ${truncate(info.resolvedOutput ?? '', 50)}`
        : info.resolution === 'absent'
          ? ' → reconcile found nothing; called again'
          : info.resolution === 'resolved'
            ? ` → resolved by an operator: ${truncate(info.resolvedOutput ?? '', 50)}`
            : info.resolution === 'retried'
              ? ' → an operator said to call again'
              : '';
    return `attempt ${info.attempt} (${info.kind})  started ${info.startedAt.toISOString()}  ${ended}  ${outcome}${settled}`;
  });
  const effect = effectSummary(records);
  if (effect && effect.kind === 'call' && effect.unknown > 0) {
    lines.push(`the callee may have seen this key ${effect.mayHaveSeen} ${effect.mayHaveSeen === 1 ? 'time' : 'times'}`);
  }
  return lines;
}

/** The error id a failed run's callers were answered with (errors/error-id.ts). */
function failedErrorId(row: LedgerRow): string | null {
  if (row.kind !== 'run' || row.status !== 'failed' || row.lastError === null) return null;
  try {
    return failedRunErrorId(row.scope, row.key, row.lastError);
  } catch {
    return null;
  }
}

export function rowJson(row: LedgerRow, nowMs: number, status = displayStatus(row, nowMs)) {
  return {
    scope: row.scope,
    key: row.key,
    kind: row.kind,
    name: row.name,
    status,
    ledgerStatus: row.status,
    parentKey: row.parentKey,
    fingerprint: row.fingerprint,
    attempts: row.attempts,
    outcome: row.outcome === null ? null : { ok: row.outcomeOk, code: row.outcomeCode, text: row.outcome },
    lastError: row.lastError === null ? null : parseJson(row.lastError),
    errorId: failedErrorId(row),
    createdAt: isoOrNull(row.createdAt),
    updatedAt: isoOrNull(row.updatedAt),
    completedAt: isoOrNull(row.completedAt),
    expiresAt: isoOrNull(row.expiresAt),
    lockedUntil: isoOrNull(row.lockedUntil),
  };
}

export function inspectionJson(inspection: Inspection) {
  return inspection.matches.map((match) => ({
    ...rowJson(match.row, inspection.nowMs, matchStatus(match, inspection.nowMs)),
    rootKey: match.rootKey || null,
    input: match.input === null ? null : parseJson(match.input),
    audit: match.audit,
    workflow: match.workflow ?? null,
    rerunOf: match.row.rerunOf ? { key: match.row.rerunOf, from: match.row.rerunFrom } : null,
    reruns: match.reruns,
    parentRun: match.row.parentRun,
    children: match.children.map((child) => ({
      ...child,
      createdAt: new Date(child.createdAt).toISOString(),
      completedAt: child.completedAt === null ? null : new Date(child.completedAt).toISOString(),
    })),
    queue: match.queue === null ? null : queueJson(match.queue),
    items: match.items.map((item) => ({
      name: item.name,
      key: item.key,
      kind: item.kind,
      recorded: item.row !== undefined,
      row: item.row ? rowJson(item.row, inspection.nowMs) : null,
      attempts: item.attempts.map((record) => {
        const info = attemptInfo(record);
        return { ...info, startedAt: info.startedAt.toISOString(), endedAt: info.endedAt?.toISOString() ?? null };
      }),
      effect: effectSummary(item.attempts) ?? null,
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

/** A queue place with ISO times. */
export function queueJson(place: QueuePlace) {
  return { ...place, enqueuedAt: new Date(place.enqueuedAt).toISOString(), notBefore: new Date(place.notBefore).toISOString() };
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
