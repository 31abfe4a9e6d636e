/**
 * What is left of the processes the suite started, read from /proc: any
 * process still in one of their process groups (a service's or the Postgres
 * owner's, whose postmaster and backends run in its group), or any child of
 * theirs, with its state — `Z` is a zombie: dead, never reaped.
 */
import { readdirSync, readFileSync } from 'node:fs';

export interface Leftover {
  pid: number;
  ppid: number;
  pgrp: number;
  state: string;
  command: string;
}

function stat(pid: number): Leftover | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const close = text.lastIndexOf(')');
    const command = text.slice(text.indexOf('(') + 1, close);
    const [state, ppid, pgrp] = text.slice(close + 2).split(' ');
    return { pid, ppid: Number(ppid), pgrp: Number(pgrp), state: state ?? '?', command };
  } catch {
    return undefined;
  }
}

/** Processes in the groups led by `leaders`, or children of `pids`. */
export function leftovers(leaders: number[], pids: number[]): Leftover[] {
  const groups = new Set(leaders);
  const parents = new Set(pids);
  const found: Leftover[] = [];
  for (const entry of readdirSync('/proc')) {
    const pid = Number(entry);
    if (!Number.isInteger(pid) || pid === process.pid) continue;
    const info = stat(pid);
    if (info && (groups.has(info.pgrp) || parents.has(info.ppid) || parents.has(info.pid))) found.push(info);
  }
  return found;
}
