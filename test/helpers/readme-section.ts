/**
 * The code blocks of a guide page (or of one `## ` section of it), in order,
 * as steps a test can follow: a file to write (a ts/json/jsonc block whose first line is
 * `// <path>`) or shell lines to run (an sh block; comments dropped). Any
 * other block in the section is an error, so nothing there goes untested.
 */
import { readFileSync } from 'node:fs';

export type ReadmeStep = { kind: 'file'; path: string; text: string } | { kind: 'sh'; lines: string[] };

export function readmeSection(readmePath: string, heading?: string): ReadmeStep[] {
  const text = readFileSync(readmePath, 'utf8');
  let section = text;
  if (heading !== undefined) {
    const start = text.indexOf(`\n## ${heading}\n`);
    if (start < 0) throw new Error(`${readmePath} has no section '## ${heading}'`);
    const rest = text.slice(start + 1);
    const end = rest.indexOf('\n## ', 1);
    section = end < 0 ? rest : rest.slice(0, end);
  }
  heading ??= readmePath;
  const steps: ReadmeStep[] = [];
  for (const [, language, body] of section.matchAll(/^```(\w*)\n([\s\S]*?)^```$/gm)) {
    const block = body!;
    if (language === 'sh') {
      const lines = block
        .split('\n')
        .map((line) => line.replace(/\s+#\s.*$/, '').trim())
        .filter((line) => line !== '' && !line.startsWith('#'));
      steps.push({ kind: 'sh', lines });
      continue;
    }
    const path = /^\/\/ (\S+)\n/.exec(block)?.[1];
    if (!path || !['ts', 'json', 'jsonc'].includes(language!)) {
      throw new Error(`'${heading}': a \`\`\`${language} block that is neither a file (first line: // <path>) nor sh:\n${block}`);
    }
    steps.push({ kind: 'file', path, text: block });
  }
  return steps;
}

/** An `npm install` line: the packages it names, and whether they are devDependencies. */
export function npmInstall(line: string): { dev: boolean; specs: string[] } | undefined {
  const words = line.split(/\s+/);
  if (words[0] !== 'npm' || (words[1] !== 'install' && words[1] !== 'i')) return undefined;
  const flags = words.slice(2).filter((word) => word.startsWith('-'));
  return { dev: flags.includes('--save-dev') || flags.includes('-D'), specs: words.slice(2).filter((word) => !word.startsWith('-')) };
}
