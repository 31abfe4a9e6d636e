/**
 * The runnable blocks of README.md and docs/ (tagged `run`, e.g. ```ts run)
 * run: each page's named blocks are written as files into a folder of the
 * page's own inside the repository (so that `stepkey` resolves to src/
 * through the `source` condition), and each runnable one is executed with
 * `node --import tsx` from that folder, as from the root of an app, against
 * a database of its own, cloned from the migrated template. The folder has
 * an empty drizzle-kit output folder, `./drizzle`: the app's own migrations,
 * for a program that hands them to `migrate()`.
 *
 * A program must exit 0; one that prints `{ first, again }` must print the
 * same value twice (a replay answers what the first call stored). A program
 * that runs until it is signalled (`handleSignals: true`, a worker) is sent
 * SIGTERM once it has printed its first line, and must then exit 0.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { createTestDatabase } from '../helpers/database.js';
import { blockFile, docBlocks, type DocBlock } from '../helpers/doc-blocks.js';
import { PATIENCE_MS } from '../helpers/patience.js';

const repo = fileURLToPath(new URL('../..', import.meta.url));
mkdirSync(join(repo, '.stepkey'), { recursive: true });
const root = mkdtempSync(join(repo, '.stepkey', 'docs-run-'));
const drops: (() => Promise<void>)[] = [];

afterAll(async () => {
  for (const drop of drops) await drop();
  rmSync(root, { recursive: true, force: true });
});

const blocks = docBlocks(repo).filter((block) => !block.tags.includes('fragment'));
const runnable = blocks.filter((block) => block.tags.includes('run'));

/** The folder of a page's app: where its blocks are files, and its programs' working directory. */
const appFolder = (block: DocBlock) => join(root, block.doc.replace(/\.md$/, ''));

/** Writes the page's blocks as files of its app, beside an empty drizzle-kit folder. */
function writeApp(block: DocBlock): void {
  for (const sibling of blocks.filter((other) => other.doc === block.doc)) {
    const file = blockFile(root, sibling);
    mkdirSync(dirname(file), { recursive: true });
    writeFileSync(file, sibling.code);
  }
  const journal = join(appFolder(block), 'drizzle', 'meta', '_journal.json');
  if (existsSync(journal)) return;
  mkdirSync(dirname(journal), { recursive: true });
  writeFileSync(journal, `${JSON.stringify({ version: '7', dialect: 'postgresql', entries: [] })}\n`);
}

interface Ran {
  stdout: string;
  stderr: string;
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** Runs the block's file; a program that waits for a signal gets SIGTERM after its first line. */
function runBlock(block: DocBlock, databaseUrl: string): Promise<Ran> {
  const untilSignalled = /\bhandleSignals:\s*true\b/.test(block.code);
  const child = spawn(process.execPath, ['--conditions=source', '--import', 'tsx', blockFile(root, block)], {
    cwd: appFolder(block),
    env: { ...process.env, DATABASE_URL: databaseUrl },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  let signalled = false;
  child.stdout.on('data', (chunk: Buffer) => {
    stdout += chunk.toString('utf8');
    if (untilSignalled && !signalled && stdout.includes('\n')) {
      signalled = true;
      child.kill('SIGTERM');
    }
  });
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
  const timer = setTimeout(() => child.kill('SIGKILL'), PATIENCE_MS);
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ stdout, stderr, code, signal });
    });
  });
}

describe('the runnable blocks of README.md and docs/', () => {
  it('include the README workflow', () => {
    expect(runnable.map((block) => `${block.doc} ${block.path}`)).toContain('README.md src/main.ts');
  });

  it.each(runnable.map((block) => [`${block.doc}:${block.line} (${block.path})`, block] as const))('%s runs', { timeout: 600_000 }, async (_, block) => {
    writeApp(block);
    const database = await createTestDatabase();
    drops.push(database.drop);
    const ran = await runBlock(block, database.url);
    if (ran.code !== 0) {
      throw new Error(`${block.doc}:${block.line} failed (exit ${ran.code ?? ran.signal}):\n${ran.stdout}${ran.stderr}`);
    }
    const { stdout } = ran;
    console.log(`${block.doc} ${block.path}:\n${stdout}`);
    const last = stdout.trim().split('\n').pop() ?? '';
    if (last.startsWith('{"first"')) {
      const { first, again } = JSON.parse(last) as { first: unknown; again: unknown };
      expect(first).toBeDefined();
      expect(again).toEqual(first);
    }
  });
});
