/**
 * The runnable blocks of README.md and docs/ (tagged `run`, e.g. ```ts run)
 * run: each page's named blocks are written as files into a folder inside
 * the repository (so that `stepkey` resolves to src/ through the `source`
 * condition), and each runnable one is executed with `node --import tsx`
 * against a database of its own, cloned from the migrated template. It must
 * exit 0; a program that prints `{ first, again }` must print the same value
 * twice (a replay answers what the first call stored).
 */
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { createTestDatabase } from '../helpers/database.js';
import { blockFile, docBlocks } from '../helpers/doc-blocks.js';
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

describe('the runnable blocks of README.md and docs/', () => {
  it('include the README workflow', () => {
    expect(runnable.map((block) => `${block.doc} ${block.path}`)).toContain('README.md src/main.ts');
  });

  it.each(runnable.map((block) => [`${block.doc}:${block.line} (${block.path})`, block] as const))('%s runs', { timeout: 600_000 }, async (_, block) => {
    for (const sibling of blocks.filter((other) => other.doc === block.doc)) {
      const file = blockFile(root, sibling);
      mkdirSync(dirname(file), { recursive: true });
      writeFileSync(file, sibling.code);
    }
    const database = await createTestDatabase();
    drops.push(database.drop);
    const { stdout } = await promisify(execFile)(process.execPath, ['--conditions=source', '--import', 'tsx', blockFile(root, block)], {
      cwd: repo,
      env: { ...process.env, DATABASE_URL: database.url },
      timeout: PATIENCE_MS,
    }).catch((error: { stdout?: string; stderr?: string; message: string }) => {
      throw new Error(`${block.doc}:${block.line} failed:\n${error.stdout ?? ''}${error.stderr ?? ''}${error.message}`);
    });
    console.log(`${block.doc} ${block.path}:\n${stdout}`);
    const last = stdout.trim().split('\n').pop() ?? '';
    if (last.startsWith('{"first"')) {
      const { first, again } = JSON.parse(last) as { first: unknown; again: unknown };
      expect(first).toBeDefined();
      expect(again).toEqual(first);
    }
  });
});
