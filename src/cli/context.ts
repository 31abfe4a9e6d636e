/**
 * What a command runs with: where its output goes, the global flags, the
 * database and the environment. Tests build one with captured writers; the
 * real process uses stdout, stderr, process.env and the working directory.
 */
import { isAbsolute, resolve } from 'node:path';
import type { Database } from '../db/connect.js';
import type { Pool } from '../db/pool.js';
import type { CommandSpec, ParsedCommand } from './args.js';
import { UsageError } from './errors.js';

export interface CliIO {
  stdout(text: string): void;
  stderr(text: string): void;
  env: Readonly<Record<string, string | undefined>>;
  cwd: string;
}

export interface GlobalFlags {
  database: string | undefined;
  app: string | undefined;
  json: boolean;
}

export interface Command extends CommandSpec {
  run(context: CliContext, parsed: ParsedCommand): Promise<number>;
}

export class CliContext {
  readonly io: CliIO;
  readonly flags: GlobalFlags;
  readonly command: string;

  constructor(io: CliIO, flags: GlobalFlags, command: string) {
    this.io = io;
    this.flags = flags;
    this.command = command;
  }

  get json(): boolean {
    return this.flags.json;
  }

  /** One line (or several) of human output. */
  line(text = ''): void {
    this.io.stdout(`${text}\n`);
  }

  /** A line on stderr: warnings and background errors, never results. */
  warn(text: string): void {
    this.io.stderr(`${text}\n`);
  }

  printJson(value: unknown): void {
    this.io.stdout(`${JSON.stringify(value, null, 2)}\n`);
  }

  hasDatabase(): boolean {
    return Boolean(this.flags.database || this.io.env.DATABASE_URL);
  }

  databaseUrl(): string {
    const url = this.flags.database || this.io.env.DATABASE_URL;
    if (!url) throw new UsageError('No database: pass --database URL or set DATABASE_URL.', this.command);
    return url;
  }

  /** Opens a small pool for the command (postgres.js alone: no drizzle loaded) and closes it when `work` ends. */
  async withPool<T>(work: (pool: Pool) => Promise<T>): Promise<T> {
    const { openPool } = await import('../db/pool.js');
    const pool = openPool(this.databaseUrl(), { max: 4, applicationName: `stepkey-cli ${this.command}` });
    try {
      return await work(pool);
    } finally {
      await pool.close();
    }
  }

  /** The same with drizzle on the pool, for what runs workflow code (an engine). */
  async withDatabase<T>(work: (database: Database) => Promise<T>): Promise<T> {
    const { connect } = await import('../db/connect.js');
    const database = connect(this.databaseUrl(), { max: 4, applicationName: `stepkey-cli ${this.command}` });
    try {
      return await work(database);
    } finally {
      await database.close();
    }
  }

  resolvePath(path: string): string {
    return isAbsolute(path) ? path : resolve(this.io.cwd, path);
  }
}

/** A URL fit to print: the password left out. */
export function describeUrl(url: string): string {
  try {
    const parsed = new URL(url);
    parsed.password = '';
    return parsed.toString();
  } catch {
    return '(unparsable URL)';
  }
}
