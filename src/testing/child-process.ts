/**
 * Runs a TypeScript file in a child process the way crash tests need it:
 * `node --import tsx file` (not a wrapper such as `npx tsx`, whose SIGKILL
 * would leave the program running), in its own process group, so that a kill
 * reaches the program and everything it started. Fault points are armed
 * through STEPKEY_FAULTS.
 */
import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export interface ChildExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface ChildHandle {
  readonly pid: number;
  /** Everything the child printed so far (stdout and stderr). */
  output(): string;
  /** Resolves with the first match of `pattern` in the output. */
  waitFor(pattern: RegExp, timeoutMs?: number): Promise<RegExpMatchArray>;
  readonly exited: Promise<ChildExit>;
  /** Sends `signal` (default SIGKILL) to the child's whole process group. */
  kill(signal?: NodeJS.Signals): void;
}

export interface SpawnOptions {
  args?: string[];
  env?: Record<string, string | undefined>;
  /** Fault points to arm, e.g. 'engine.after-step-commit:charge-card.v1'. */
  faults?: string;
  cwd?: string;
}

const packageRoot = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const running = new Set<ChildHandle>();

process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

export function spawnScript(file: string, options: SpawnOptions = {}): ChildHandle {
  const child = spawn(process.execPath, ['--import', 'tsx', file, ...(options.args ?? [])], {
    cwd: options.cwd ?? packageRoot,
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: {
      ...process.env,
      ...options.env,
      STEPKEY_FAULTS: options.faults ?? options.env?.STEPKEY_FAULTS ?? '',
    },
  });
  let output = '';
  const watchers = new Set<() => void>();
  const append = (chunk: Buffer) => {
    output += chunk.toString('utf8');
    for (const watcher of watchers) watcher();
  };
  child.stdout?.on('data', append);
  child.stderr?.on('data', append);

  const exited = new Promise<ChildExit>((resolve) => {
    child.once('exit', (code, signal) => {
      running.delete(handle);
      resolve({ code, signal });
    });
  });
  // 'exit' can come before the last of the child's output has been read: its output is complete
  // once its pipes close ('close'), or a moment after its exit if a process it started holds them.
  let finished = false;
  const finish = () => {
    if (finished) return;
    finished = true;
    for (const watcher of watchers) watcher();
  };
  child.once('close', finish);
  void exited.then(() => setTimeout(finish, 1_000).unref());

  const handle: ChildHandle = {
    pid: child.pid ?? -1,
    output: () => output,
    exited,
    kill(signal: NodeJS.Signals = 'SIGKILL') {
      if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
      try {
        process.kill(-child.pid, signal);
      } catch {
        // The group is gone already.
      }
    },
    waitFor(pattern: RegExp, timeoutMs = 30_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const match = pattern.exec(output);
          if (match) {
            done();
            resolve(match);
          } else if (finished) {
            done();
            const how = child.signalCode ? `by ${child.signalCode}` : `with code ${child.exitCode}`;
            reject(new Error(`child ${child.pid} exited ${how} before printing ${pattern}; output:\n${output}`));
          }
        };
        const timer = setTimeout(() => {
          done();
          reject(new Error(`child ${child.pid} did not print ${pattern} within ${timeoutMs} ms; output:\n${output}`));
        }, timeoutMs);
        const done = () => {
          clearTimeout(timer);
          watchers.delete(check);
        };
        watchers.add(check);
        check();
      });
    },
  };
  running.add(handle);
  return handle;
}
