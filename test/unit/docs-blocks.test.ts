/**
 * Examples that cannot rot: every TypeScript block of README.md and docs/ is
 * compiled, all in one TypeScript program, with the repository's compiler
 * options (strict, NodeNext, the `source` condition: `stepkey`, `stepkey/trpc`
 * … resolve to src/). Only blocks tagged `fragment` are skipped, and counted.
 * The blocks tagged `run` are executed by test/integration/docs-run.test.ts.
 */
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { blockFile, docBlocks, type DocBlock } from '../helpers/doc-blocks.js';

const repo = fileURLToPath(new URL('../..', import.meta.url));
/** The blocks' virtual folder: inside the repository, where `stepkey` is this package. */
const root = join(repo, '.stepkey', 'docs-blocks');

/** Compiles the blocks in one program; the diagnostics, each pointing at its page and line. */
export function compileBlocks(blocks: DocBlock[]): string[] {
  const config = ts.getParsedCommandLineOfConfigFile(join(repo, 'tsconfig.json'), {}, { ...ts.sys, onUnRecoverableConfigFileDiagnostic: () => {} });
  if (!config) throw new Error('tsconfig.json does not parse');
  const options: ts.CompilerOptions = { ...config.options, noEmit: true, declaration: false, sourceMap: false, moduleDetection: ts.ModuleDetectionKind.Force };
  const files = new Map<string, DocBlock>();
  for (const block of blocks) {
    const file = blockFile(root, block);
    const earlier = files.get(file);
    if (earlier) throw new Error(`${block.doc}:${block.line}: a second block named ${block.path} (the first at line ${earlier.line})`);
    files.set(file, block);
  }
  const dirs = new Set([...files.keys()].flatMap((file) => {
    const parents: string[] = [];
    for (let dir = dirname(file); dir.startsWith(root); dir = dirname(dir)) parents.push(dir);
    return parents;
  }));
  const host = ts.createCompilerHost(options, true);
  const { fileExists, readFile, getSourceFile, directoryExists } = host;
  host.fileExists = (file) => files.has(file) || (!file.startsWith(root) && fileExists.call(host, file));
  host.readFile = (file) => files.get(file)?.code ?? (file.startsWith(root) ? undefined : readFile.call(host, file));
  host.directoryExists = (dir) => dirs.has(dir) || root.startsWith(dir) || (!dir.startsWith(root) && (directoryExists?.call(host, dir) ?? existsSync(dir)));
  host.getSourceFile = (file, language, onError, create) => {
    const block = files.get(file);
    return block ? ts.createSourceFile(file, block.code, language, true) : getSourceFile.call(host, file, language, onError, create);
  };
  const program = ts.createProgram({ rootNames: [...files.keys()], options, host });
  const diagnostics = [...program.getOptionsDiagnostics(), ...program.getGlobalDiagnostics()];
  for (const file of files.keys()) {
    const source = program.getSourceFile(file)!;
    diagnostics.push(...program.getSyntacticDiagnostics(source), ...program.getSemanticDiagnostics(source));
  }
  return diagnostics.map((diagnostic) => {
    const message = ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n');
    const block = diagnostic.file && files.get(diagnostic.file.fileName);
    if (!diagnostic.file || diagnostic.start === undefined) return message;
    const { line } = diagnostic.file.getLineAndCharacterOfPosition(diagnostic.start);
    return block ? `${block.doc}:${block.line + line}: ${message}` : `${diagnostic.file.fileName}:${line + 1}: ${message}`;
  });
}

describe('the TypeScript blocks of README.md and docs/', () => {
  const blocks = docBlocks(repo);
  const fragments = blocks.filter((block) => block.tags.includes('fragment'));
  const compiled = blocks.filter((block) => !block.tags.includes('fragment'));

  it('compile, all in one program', { timeout: 600_000 }, () => {
    console.log(
      `docs blocks: ${compiled.length} compiled in one program, ${fragments.length} fragment(s) skipped, ` +
        `${compiled.filter((block) => block.tags.includes('run')).length} run by test/integration/docs-run.test.ts`,
    );
    expect(compiled.length).toBeGreaterThan(10);
    expect(compileBlocks(compiled)).toEqual([]);
  });

  it('tags only as fragment or run', () => {
    expect(blocks.flatMap((block) => block.tags.filter((tag) => tag !== 'fragment' && tag !== 'run').map((tag) => `${block.doc}:${block.line}: ${tag}`))).toEqual([]);
    expect(fragments.filter((block) => block.tags.includes('run'))).toEqual([]);
  });

  it("include the README's workflow, which is run", () => {
    const readme = compiled.filter((block) => block.doc === 'README.md');
    expect(readme.map((block) => block.path)).toEqual(expect.arrayContaining(['src/checkout.ts', 'src/main.ts']));
    expect(readme.find((block) => block.path === 'src/main.ts')?.tags).toContain('run');
  });
});
