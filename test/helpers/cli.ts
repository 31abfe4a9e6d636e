/**
 * Running the CLI in-process for tests: `main(argv)` with captured stdout and
 * stderr, the test database as DATABASE_URL and a working directory of the
 * test's choosing.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll } from 'vitest';
import { main } from '../../src/cli/main.js';
import type { TestDatabase } from './database.js';

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
  /** stdout parsed as JSON (for --json runs). */
  json<T = any>(): T;
}

export interface CliOptions {
  /** DATABASE_URL for the run (undefined: none). */
  databaseUrl?: string;
  cwd?: string;
  env?: Record<string, string | undefined>;
}

/** Absolute path of a test app module in test/helpers/scripts. */
export function appModule(name: 'cli-app' | 'cli-app-changed' | 'cli-app-added' | 'cli-app-flow'): string {
  return fileURLToPath(new URL(`./scripts/${name}.ts`, import.meta.url));
}

export async function runCli(argv: string[], options: CliOptions = {}): Promise<CliResult> {
  let stdout = '';
  let stderr = '';
  const code = await main(argv, {
    stdout: (text) => void (stdout += text),
    stderr: (text) => void (stderr += text),
    env: { DATABASE_URL: options.databaseUrl, ...options.env },
    cwd: options.cwd ?? process.cwd(),
  });
  return {
    code,
    stdout,
    stderr,
    json: () => {
      try {
        return JSON.parse(stdout);
      } catch {
        throw new Error(`stepkey ${argv.join(' ')} exited ${code} without JSON on stdout; stderr: ${stderr}`);
      }
    },
  };
}

/**
 * A file's CLI: runs against the file's test database (or none, `offline`) in
 * an empty working directory made for the file and removed after it.
 */
export function useCli(db: () => TestDatabase): {
  cli: (argv: string[], options?: { cwd?: string; offline?: boolean; env?: CliOptions['env'] }) => Promise<CliResult>;
  dir: () => string;
} {
  let dir = '';
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'stepkey-cli-'));
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));
  return {
    cli: (argv, options = {}) =>
      runCli(argv, {
        ...(options.offline ? {} : { databaseUrl: db().url }),
        cwd: options.cwd ?? dir,
        ...(options.env ? { env: options.env } : {}),
      }),
    dir: () => dir,
  };
}
