/**
 * A process the chaos suite starts: `node --import tsx <file>` in a process
 * group of its own, its output in a log file (the last lines kept for the
 * report), its stdin a pipe (closing it tells the app's services and the
 * Postgres owner that the suite is gone). Every exit is recorded: one before
 * the suite asked for it is a crash.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { createInterface } from 'node:readline';

export interface ChildExit {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** Whether the suite had asked it to stop. */
  asked: boolean;
  atMs: number;
}

export interface Child {
  readonly name: string;
  readonly pid: number;
  readonly process: ChildProcess;
  /** Resolves with the first line matching `pattern` (rejects if the process exits first or `timeoutMs` passes). */
  line(pattern: RegExp, timeoutMs: number): Promise<RegExpMatchArray>;
  /** Set once it has exited. */
  exit: ChildExit | undefined;
  readonly exited: Promise<ChildExit>;
  /** The last lines of its output. */
  tail(): string[];
  /** Asks it to stop (SIGTERM, or closing stdin), SIGKILLs its group after `timeoutMs`; resolves with the exit. */
  stop(timeoutMs: number, how?: 'SIGTERM' | 'stdin'): Promise<ChildExit & { killed: boolean }>;
}

export function startChild(name: string, file: string, options: { cwd: string; env: Record<string, string>; logFile: string; began: number }): Child {
  const child = spawn(process.execPath, ['--import', 'tsx', file], {
    cwd: options.cwd,
    detached: true,
    stdio: ['pipe', 'pipe', 'pipe'],
    env: { ...process.env, ...options.env },
  });
  if (child.pid === undefined) throw new Error(`${name} could not be started`);
  const log = createWriteStream(options.logFile, { flags: 'a' });
  const last: string[] = [];
  const waiters: { pattern: RegExp; resolve: (m: RegExpMatchArray) => void }[] = [];
  for (const stream of [child.stdout!, child.stderr!]) {
    createInterface({ input: stream }).on('line', (line) => {
      log.write(`${line}\n`);
      last.push(line);
      if (last.length > 40) last.shift();
      for (const waiter of [...waiters]) {
        const found = waiter.pattern.exec(line);
        if (found) {
          waiters.splice(waiters.indexOf(waiter), 1);
          waiter.resolve(found);
        }
      }
    });
  }
  let asked = false;
  const handle: Child = {
    name,
    pid: child.pid,
    process: child,
    exit: undefined,
    exited: new Promise<ChildExit>((resolve) =>
      child.once('exit', (code, signal) => {
        handle.exit = { code, signal, asked, atMs: Date.now() - options.began };
        resolve(handle.exit);
      }),
    ),
    tail: () => [...last],
    line(pattern, timeoutMs) {
      const found = new Promise<RegExpMatchArray>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`${name}: no line matching ${pattern} within ${timeoutMs} ms`)), timeoutMs);
        waiters.push({
          pattern,
          resolve: (found) => {
            clearTimeout(timer);
            resolve(found);
          },
        });
        void handle.exited.then((exit) => {
          clearTimeout(timer);
          reject(new Error(`${name} exited (code ${exit.code}, signal ${exit.signal}) before a line matching ${pattern}`));
        });
      });
      // A wait nobody awaits any more (it lost a race) must not surface as an unhandled rejection.
      found.catch(() => {});
      return found;
    },
    async stop(timeoutMs, how = 'SIGTERM') {
      asked = true;
      let killed = false;
      if (!handle.exit) {
        if (how === 'stdin') child.stdin?.end();
        else child.kill('SIGTERM');
      }
      const timer = setTimeout(() => {
        killed = true;
        killGroup(child.pid!);
      }, timeoutMs);
      const exit = await handle.exited;
      clearTimeout(timer);
      log.end();
      return { ...exit, killed };
    },
  };
  // Its stdin errors (EPIPE) when it is gone; the exit is what counts.
  child.stdin?.on('error', () => {});
  return handle;
}

/** SIGKILL to a whole process group, by its leader's pid. */
export function killGroup(pid: number): void {
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    // Gone already.
  }
}
