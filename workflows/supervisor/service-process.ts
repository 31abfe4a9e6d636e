/**
 * One process started by the `npm start` supervisor: `node --import tsx
 * <file>` in its own process group (a Ctrl-C in the terminal reaches the
 * supervisor, which stops everything in order), its output prefixed with its
 * name, its stdin a pipe whose closing tells it the supervisor is gone.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';

export interface ServiceProcess {
  readonly name: string;
  readonly pid: number;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** SIGTERM, then SIGKILL to its group after `timeoutMs`. */
  stop(timeoutMs: number): Promise<void>;
  kill(): void;
}

export async function startService(
  name: string,
  file: string,
  options: { cwd: string; env: Record<string, string>; ready: RegExp; timeoutMs?: number },
): Promise<{ service: ServiceProcess; match: RegExpMatchArray }> {
  const child: ChildProcess = spawn(process.execPath, ['--import', 'tsx', file], {
    cwd: options.cwd,
    detached: true,
    stdio: ['pipe', 'pipe', 'pipe'],
    env: { ...process.env, ...options.env, STEPKEY_SUPERVISED: '1' },
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  const killGroup = () => {
    try {
      if (child.pid !== undefined && child.exitCode === null && child.signalCode === null) process.kill(-child.pid, 'SIGKILL');
    } catch {
      // Gone already.
    }
  };
  const service: ServiceProcess = {
    name,
    pid: child.pid ?? -1,
    exited,
    kill: killGroup,
    async stop(timeoutMs) {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(killGroup, timeoutMs);
      await exited;
      clearTimeout(timer);
    },
  };
  const match = await new Promise<RegExpMatchArray>((resolve, reject) => {
    const timer = setTimeout(() => {
      killGroup();
      reject(new Error(`${name} did not start within ${options.timeoutMs ?? 60_000} ms`));
    }, options.timeoutMs ?? 60_000);
    for (const stream of [child.stdout!, child.stderr!]) {
      createInterface({ input: stream }).on('line', (line) => {
        process.stdout.write(`[${name}] ${line}\n`);
        const found = options.ready.exec(line);
        if (found) {
          clearTimeout(timer);
          resolve(found);
        }
      });
    }
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`${name} exited (code ${code}, signal ${signal}) before it was ready`));
    });
  });
  return { service, match };
}
