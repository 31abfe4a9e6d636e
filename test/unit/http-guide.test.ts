/**
 * docs/http.md shows code that compiles: each of its ts blocks names, on its
 * first line, the file under test/ that holds it — which `npm run typecheck`
 * compiles — and is that file, character for character.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const repo = fileURLToPath(new URL('../..', import.meta.url));
const guide = readFileSync(`${repo}docs/http.md`, 'utf8');
const blocks = [...guide.matchAll(/^```(\w*)\n([\s\S]*?)^```$/gm)].map(([, language, body]) => ({ language, body: body! }));

describe('docs/http.md', () => {
  it('has an Express and a Hono example, and no other code block', () => {
    expect(blocks.map((block) => block.language)).toEqual(['ts', 'ts']);
    expect(blocks.map((block) => /^\/\/ (\S+)/.exec(block.body)?.[1])).toEqual(['test/guide/http-express.ts', 'test/guide/http-hono.ts']);
  });

  it.each(blocks.map((block) => [/^\/\/ (\S+)/.exec(block.body)?.[1] ?? '(unnamed)', block.body]))('shows %s as it is', (path, body) => {
    expect(body).toBe(readFileSync(`${repo}${path}`, 'utf8'));
  });
});
