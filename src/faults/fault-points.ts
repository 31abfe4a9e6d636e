/**
 * Fault points: named places in stepkey's code path where a test can make the
 * process die, exactly there, with SIGKILL — no exception, no cleanup, no
 * finally blocks. They do nothing unless armed.
 *
 * Arm them with the environment variable STEPKEY_FAULTS before the process
 * starts, or with armFaults() in-process:
 *
 *   STEPKEY_FAULTS="ledger.after-claim"            the first time that point is reached
 *   STEPKEY_FAULTS="engine.after-step-commit:charge-card.v1"   only for that label
 *   STEPKEY_FAULTS="engine.before-step:confirm.v1@2"           the second time
 *
 * Several entries are separated by commas.
 */

export const faultPoints = [
  'ledger.after-claim',
  'ledger.before-commit',
  'ledger.after-commit',
  'engine.before-step',
  'engine.after-step-commit',
  'engine.before-call',
  'engine.in-call',
  'engine.before-complete',
  'engine.after-park',
  'engine.after-limit-acquire',
  'engine.after-child-start',
  'outbox.after-enqueue',
  'outbox.after-apply',
  'trpc.before-response',
  'http.before-response',
] as const;

export type FaultPoint = (typeof faultPoints)[number];

interface Armed {
  point: FaultPoint;
  label: string | undefined;
  hit: number;
  seen: number;
  /** In-process (onFaultPoint): run instead of the kill. */
  action?: () => void;
}

let armed: Armed[] = [];

function parse(spec: string): Armed[] {
  return spec
    .split(',')
    .map((entry) => entry.trim())
    .filter((entry) => entry.length > 0)
    .map((entry) => {
      const match = /^([a-z-]+\.[a-z-]+)(?::([^@]+))?(?:@(\d+))?$/.exec(entry);
      const point = match?.[1] as FaultPoint | undefined;
      if (!match || !point || !faultPoints.includes(point)) {
        throw new Error(`Unknown fault point '${entry}'; known points: ${faultPoints.join(', ')}`);
      }
      return { point, label: match[2], hit: match[3] ? Number(match[3]) : 1, seen: 0 };
    });
}

/** Arms fault points in this process (replacing any armed before). */
export function armFaults(spec: string): void {
  armed = parse(spec);
}

export function disarmFaults(): void {
  armed = [];
}

/**
 * In-process, for a test that must act at an exact point (begin a shutdown
 * just after a child's start commits, say): runs `action` synchronously
 * there, instead of the kill, the `hit`-th time `point` is reached with
 * `label` (any label if undefined). Returns what disarms it.
 */
export function onFaultPoint(point: FaultPoint, label: string | undefined, action: () => void, hit = 1): () => void {
  const entry: Armed = { point, label, hit, seen: 0, action };
  armed = [...armed, entry];
  return () => {
    armed = armed.filter((other) => other !== entry);
  };
}

/** Kills this process with SIGKILL if `point` (with this label) is armed; runs an onFaultPoint action instead. */
export function faultPoint(point: FaultPoint, label?: string): void {
  if (armed.length === 0) return;
  for (const entry of armed) {
    if (entry.point !== point || (entry.label !== undefined && entry.label !== label)) continue;
    entry.seen += 1;
    if (entry.seen === entry.hit && entry.action) entry.action();
    else if (entry.seen === entry.hit) {
      process.stderr.write(`stepkey fault point ${point}${label ? `:${label}` : ''} fired\n`);
      process.kill(process.pid, 'SIGKILL');
    }
  }
}

if (process.env.STEPKEY_FAULTS) armFaults(process.env.STEPKEY_FAULTS);
