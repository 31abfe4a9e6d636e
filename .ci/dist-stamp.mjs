/**
 * Whether dist/ is a finished build of the sources as they are, so that
 * `npm pack` (its prepack) builds only when it is not: `npm run build` ends by
 * writing the sha256 of its inputs — every file under src/, the package
 * manifest and lockfile, the TypeScript and Vite configurations — to
 * dist/.inputs-sha256 (left out of the package).
 *
 *   node .ci/dist-stamp.mjs write   after a build
 *   node .ci/dist-stamp.mjs fresh   exit 0 if dist/ is a build of these inputs, 1 (saying why) if not
 */
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const stamp = join(root, 'dist', '.inputs-sha256');
const configs = ['package.json', 'package-lock.json', 'tsconfig.json', 'tsconfig.build.json', 'vite.dashboard.config.ts'];

function filesUnder(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory() ? filesUnder(join(dir, entry.name)) : [join(dir, entry.name)],
  );
}

function inputsHash() {
  const hash = createHash('sha256');
  const files = [...filesUnder(join(root, 'src')), ...configs.map((name) => join(root, name))]
    .map((file) => relative(root, file).split('\\').join('/'))
    .sort();
  for (const file of files) hash.update(`${file}\0`).update(readFileSync(join(root, file))).update('\0');
  return hash.digest('hex');
}

const mode = process.argv[2];
if (mode === 'write') {
  writeFileSync(stamp, `${inputsHash()}\n`);
} else if (mode === 'fresh') {
  let built;
  try {
    built = readFileSync(stamp, 'utf8').trim();
  } catch {
    console.error('dist/ holds no finished build: building.');
    process.exit(1);
  }
  if (built !== inputsHash()) {
    console.error('dist/ is a build of other sources: building.');
    process.exit(1);
  }
  console.error('dist/ is a build of these sources: packing it as it is.');
} else {
  console.error('usage: node .ci/dist-stamp.mjs write|fresh');
  process.exit(2);
}
