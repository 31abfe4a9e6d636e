/**
 * The architecture, checked: every folder of src/ sits on a layer, in the
 * order data flows through stepkey, and no module imports from a layer above
 * its own (type-only imports included: a reader should find every rule in the
 * layer that owns it). A run's status is written by the lifecycle module
 * alone: no other file holds an UPDATE of the ledger that sets a status —
 * but the ledger's own, which writes the status of any key through its
 * public API (requests, effects), and which nothing above it uses to write a
 * run's (a run's claim takes over through the lifecycle). A row comes into
 * being with a status only through a claim: no file but the lifecycle's and
 * the ledger's claim (and its finish, which writes a key that is not a run
 * completed at once) holds an INSERT into the ledger that sets one.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const src = fileURLToPath(new URL('../../src', import.meta.url));

/** Each folder of src/ and its layer: a module may import from its own layer and those below. */
export const layers: Record<string, number> = {
  errors: 0,
  keys: 1,
  db: 1,
  faults: 1,
  log: 1,
  telemetry: 1,
  embedded: 1,
  ledger: 2,
  lifecycle: 3,
  workflow: 4,
  flow: 5,
  outbox: 5,
  read: 6,
  actions: 7,
  engine: 8,
  schedules: 8,
  worker: 9,
  metrics: 9,
  idempotency: 9,
  trpc: 10,
  http: 10,
  cli: 10,
  dashboard: 10,
  testing: 10,
};

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return files(path);
    return /\.(ts|tsx)$/.test(name) && !name.endsWith('.test.ts') ? [path] : [];
  });
}

const folderOf = (path: string) => relative(src, path).split(sep)[0]!;

/** Whether SQL in `text` inserts into the ledger with a status: named in its column list, or no column list (every column). */
function insertsStatus(text: string): boolean {
  return [...text.matchAll(/insert\s+into\s+"?stepkey"?\."?ledger"?(?![\w"])\s*(\(([^)]*)\))?/gi)].some(
    (m) => m[1] === undefined || /\bstatus\b/i.test(m[2]!),
  );
}
const imports = (text: string) => [...text.matchAll(/(?:import|export)\s[^'"]*?from\s+'(\.[^']+)'|import\(\s*'(\.[^']+)'\s*\)/g)].map((m) => (m[1] ?? m[2])!);

describe('layers', () => {
  const all = files(src);

  it('places every folder of src/ on a layer', () => {
    const folders = new Set(all.map(folderOf).filter((folder) => !folder.endsWith('.ts')));
    expect([...folders].filter((folder) => layers[folder] === undefined)).toEqual([]);
  });

  it('imports only from its own layer or below', () => {
    const upward: string[] = [];
    for (const file of all) {
      const from = folderOf(file);
      if (from.endsWith('.ts')) continue; // src/index.ts: the public surface, above every layer
      for (const specifier of imports(readFileSync(file, 'utf8'))) {
        const target = relative(src, join(file, '..', specifier));
        if (target.startsWith('..')) continue;
        const to = target.split(sep)[0]!;
        if (to.endsWith('.js') || to === from) continue;
        if ((layers[to] ?? Infinity) > (layers[from] ?? -1)) upward.push(`${relative(src, file)} → ${target} (${from} ${layers[from]} → ${to} ${layers[to]})`);
      }
    }
    expect(upward).toEqual([]);
  });

  it('writes a run’s status only in src/lifecycle', () => {
    const writers: string[] = [];
    for (const file of all) {
      if (folderOf(file) === 'lifecycle' || folderOf(file) === 'ledger') continue;
      const text = readFileSync(file, 'utf8');
      // An UPDATE of the ledger whose SET list assigns status (up to the WHERE).
      for (const m of text.matchAll(/update\s+"?stepkey"?\."?ledger"?[\s\S]*?\bwhere\b/gi)) {
        if (/\bset\b[\s\S]*\bstatus\s*=/i.test(m[0])) writers.push(relative(src, file));
      }
      // A SET list built in pieces: an assignment of status at the start of a line of SQL.
      if (/stepkey\.ledger|\$\{[^}]*ledger/.test(text) && /^\s*(set\s+)?status\s*=\s*(case\b|'|\$\{)/im.test(text)) writers.push(relative(src, file));
    }
    expect([...new Set(writers)]).toEqual([]);
  });

  it('inserts a row with a status only in src/lifecycle and the ledger’s claim (and finish)', () => {
    // The ledger's claim of a key (a run's too, through lifecycle/claim.ts); its finish writes a
    // key that is not a run (a folded request, an effect) completed at once.
    const allowed = new Set([join('ledger', 'sql', 'claim.ts'), join('ledger', 'sql', 'finish.ts')]);
    const inserters = all
      .filter((file) => folderOf(file) !== 'lifecycle' && !allowed.has(relative(src, file)))
      .filter((file) => insertsStatus(readFileSync(file, 'utf8')))
      .map((file) => relative(src, file));
    expect(inserters).toEqual([]);
  });

  it('would see an INSERT that sets a status', () => {
    expect(insertsStatus("q`\n    insert into stepkey.ledger\n      (scope, key, kind, status)\n    values (${a}, ${b}, 'run', 'in_progress')`")).toBe(true);
    expect(insertsStatus('insert into "stepkey"."ledger" select * from old')).toBe(true);
    expect(insertsStatus('insert into stepkey.ledger (scope, key, fingerprint) values ($1, $2, $3)')).toBe(false);
    expect(insertsStatus("insert into stepkey.steps (scope, key, status) values ($1, $2, 'done')")).toBe(false);
  });

  it('leaves the ledger’s status writes to the ledger: nothing above it moves a run with them', () => {
    const users = all.filter(
      (file) => folderOf(file) !== 'ledger' && /ledger\/sql\/(finish|takeover)\.js'/.test(readFileSync(file, 'utf8')),
    );
    // An expired run is forgotten as any key is (lifecycle/expire.ts names the statement); an effect's key is written completed by the outbox.
    expect(users.map((file) => relative(src, file)).sort()).toEqual(['lifecycle/expire.ts', 'lifecycle/take-over.ts', 'outbox/enqueue.ts']);
  });
});
