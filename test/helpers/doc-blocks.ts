/**
 * The TypeScript blocks of README.md and docs/ (```ts or ```typescript), so
 * that tests can compile every one and run the runnable ones.
 *
 * A block's info string may carry tags after the language: `fragment` (not
 * compiled: a piece of a larger program) and `run` (a complete program that
 * the run test executes against a test database). A block whose first line
 * is `// <path>.ts` is that file of the page's app: blocks of one page import
 * each other by those paths (`import { checkout } from './checkout.js'`).
 * Every other block is a module of its own.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';

export interface DocBlock {
  /** The page, relative to the repository (README.md, docs/waits.md). */
  doc: string;
  /** The line of the page where the block's code starts (1-based). */
  line: number;
  /** The file the block is: its `// <path>` first line, or `block-<n>.ts`. */
  path: string;
  tags: string[];
  code: string;
}

/** README.md and every page under docs/, in a stable order. */
export function docPages(repo: string): string[] {
  const walk = (dir: string): string[] =>
    readdirSync(join(repo, dir), { withFileTypes: true })
      .flatMap((entry) => (entry.isDirectory() ? walk(join(dir, entry.name)) : [join(dir, entry.name)]))
      .filter((path) => path.endsWith('.md'));
  return ['README.md', ...walk('docs').sort()];
}

export function docBlocks(repo: string, pages: string[] = docPages(repo)): DocBlock[] {
  const blocks: DocBlock[] = [];
  for (const doc of pages) {
    const text = readFileSync(join(repo, doc), 'utf8');
    let index = 0;
    for (const match of text.matchAll(/^```(\w+)([^\n]*)\n([\s\S]*?)^```$/gm)) {
      const [, language, info, code] = match;
      if (language !== 'ts' && language !== 'typescript') continue;
      index += 1;
      const line = text.slice(0, match.index).split('\n').length + 1;
      const named = /^\/\/ (\S+\.ts)\b/.exec(code!)?.[1];
      blocks.push({ doc: relative(repo, join(repo, doc)), line, path: named ?? `block-${index}.ts`, tags: info!.trim().split(/\s+/).filter(Boolean), code: code! });
    }
  }
  return blocks;
}

/** Where a block lives as a file: a folder per page, inside the repository (so `stepkey` resolves to it). */
export function blockFile(root: string, block: DocBlock): string {
  return join(root, block.doc.replace(/\.md$/, ''), block.path);
}
