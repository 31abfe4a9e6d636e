/**
 * `stepkey check`: holds the app to its step-name contract. Builds the
 * manifest of the app as it is now, compares it with the committed one, and —
 * given a database — finds the runs and jobs the change would strand.
 * `--write` records the current manifest.
 */
import { loadAppModule } from '../app-module.js';
import { stringFlag } from '../args.js';
import type { CliContext, Command } from '../context.js';
import { ExitCode } from '../errors.js';
import { plural } from '../format.js';
import { buildManifest, countManifest, defaultManifestFile, readManifest, serializeManifest, writeManifest } from '../manifest.js';
import { diffManifests, type ManifestDiff } from '../manifest-diff.js';
import { findOrphans, type Orphans } from '../orphans.js';

export const checkCommand: Command = {
  name: 'check',
  description: `
Builds the manifest of the app module (workflows → versions → step names, and
effect names) and compares it with the committed manifest file. Adding
workflows, versions, steps or effects is fine. It fails (exit 1), naming each,
when a workflow version disappeared, a step name was removed or renamed within
an existing version, or an effect was removed.

With a database (--database or DATABASE_URL; --offline to skip), it also lists
the runs the app would strand: in-progress or failed runs (fail the check) and
unexpired completed runs (notes) of versions it no longer registers or that
recorded steps their version no longer declares, and pending or failed jobs of
effects it no longer defines (fail the check).

--write records the app's manifest (refused while there are problems, unless
--force: use it once no live runs depend on what was removed). Without a
manifest file, check explains how to create one and exits 1.`,
  positionals: [],
  options: {
    manifest: { type: 'string', value: 'FILE', description: `the manifest file (default ./${defaultManifestFile})` },
    write: { type: 'boolean', description: 'write the current manifest' },
    force: { type: 'boolean', description: 'with --write: write even though there are problems' },
    offline: { type: 'boolean', description: 'skip the database even if DATABASE_URL is set' },
  },
  async run(context, parsed) {
    const path = context.resolvePath(stringFlag(parsed.values, 'manifest') ?? defaultManifestFile);
    const write = parsed.values.write === true;
    const force = parsed.values.force === true;
    const app = await loadAppModule(context, { required: true });
    const current = buildManifest(app.workflows, app.effects);
    const committed = await readManifest(path);
    const diff: ManifestDiff = committed ? diffManifests(committed, current) : { problems: [], additions: [] };
    const orphans =
      context.hasDatabase() && parsed.values.offline !== true
        ? await context.withPool((database) => findOrphans(database.sql, app.workflows, app.effects))
        : undefined;
    const failures = diff.problems.length + (orphans ? orphans.live + orphans.jobs.length : 0);
    const unchanged = committed !== undefined && serializeManifest(committed) === serializeManifest(current);
    let written = false;
    if (write && (failures === 0 || force) && !unchanged) {
      await writeManifest(path, current);
      written = true;
    }
    const ok = failures === 0 && (committed !== undefined || written);
    if (context.json) {
      context.printJson({ ok, manifest: path, exists: committed !== undefined, written, current, ...diff, orphans: orphans ?? null });
    } else {
      report(context, { path, committed: committed !== undefined, diff, orphans, write, force, written, unchanged, failures, counts: countManifest(current) });
    }
    return ok || (written && force) ? ExitCode.ok : ExitCode.failed;
  },
};

interface Report {
  path: string;
  committed: boolean;
  diff: ManifestDiff;
  orphans: Orphans | undefined;
  write: boolean;
  force: boolean;
  written: boolean;
  unchanged: boolean;
  failures: number;
  counts: ReturnType<typeof countManifest>;
}

function report(context: CliContext, r: Report): void {
  if (!r.committed && !r.written) {
    context.line(`No manifest at ${r.path} yet.`);
    context.line('Create it with `stepkey check --write`, commit it, and run `stepkey check` in CI before every deploy:');
    context.line('it fails when a workflow version, a step name within a version, or an effect disappears.');
  }
  for (const problem of r.diff.problems) context.line(`FAIL  ${problem.message}`);
  for (const addition of r.diff.additions) context.line(`new   ${addition.message}`);
  if (r.orphans) {
    for (const entry of r.orphans.runs) context.line(`${entry.live ? 'FAIL' : 'note'}  ${entry.message}`);
    for (const jobs of r.orphans.jobs) context.line(`FAIL  ${jobs.message}`);
    if (r.diff.problems.length > 0 && r.orphans.runs.every((entry) => !entry.live)) {
      context.line('note  no live run depends on what was removed: once you are sure, `stepkey check --write --force` records it.');
    }
  } else if (r.diff.problems.length > 0) {
    context.line('note  no database given (--database or DATABASE_URL): live runs that depend on this were not looked for.');
  }
  const { workflows, versions, steps, effects } = r.counts;
  const summary = `${plural(workflows, 'workflow')}, ${plural(versions, 'version')}, ${plural(steps, 'step')}, ${plural(effects, 'effect')}`;
  if (r.written) context.line(`Wrote ${r.path} (${summary})${r.failures > 0 ? ' despite the problems above (--force)' : ''}.`);
  else if (r.write && r.failures > 0) context.line(`Not written: ${plural(r.failures, 'problem')} (fix them, or pass --force).`);
  else if (r.write && r.unchanged) context.line(`${r.path} is up to date.`);
  if (r.failures > 0) context.line(`check failed: ${plural(r.failures, 'problem')}.`);
  else if (r.committed && !r.written) {
    const more = r.diff.additions.length > 0 ? ` ${plural(r.diff.additions.length, 'addition')}: run \`stepkey check --write\` to record them.` : '';
    context.line(`check passed (${summary}).${more}`);
  }
}
