/**
 * `stepkey check`: the manifest written, held, broken by a careless deploy
 * (renamed step, removed effect), extended by a careful one (version 2), and
 * the live runs and jobs a change would strand.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { enqueueEffect } from '../../src/outbox/enqueue.js';
import { appModule, useCli } from '../helpers/cli.js';
import { completedCheckout, failedCheckout } from '../helpers/cli-fixtures.js';
import { useTestDatabase } from '../helpers/database.js';
import { uniqueKey } from '../helpers/ledger.js';
import { audit } from '../helpers/scripts/cli-app.js';

const db = useTestDatabase();
const { cli, dir: workDir } = useCli(db);

describe('check', () => {
  type AppName = Parameters<typeof appModule>[0];
  /** check without a database (DATABASE_URL unset). */
  const check = (module: AppName, ...more: string[]) =>
    cli(['check', '--app', appModule(module), ...more], { offline: true });
  /** check with the test database as DATABASE_URL. */
  const online = (module: AppName, ...more: string[]) => cli(['check', '--app', appModule(module), ...more]);

  it('explains how to create a manifest, writes it sorted, then passes', async () => {
    const missing = await check('cli-app');
    expect(missing.code).toBe(1);
    expect(missing.stdout).toContain('No manifest at');
    expect(missing.stdout).toContain('stepkey check --write');

    const written = await check('cli-app', '--write');
    expect(written.code).toBe(0);
    expect(written.stdout).toMatch(/Wrote .*stepkey\.manifest\.json \(3 workflows, 3 versions, 6 steps, 2 effects\)/);
    const manifest = JSON.parse(await readFile(join(workDir(), 'stepkey.manifest.json'), 'utf8'));
    expect(manifest).toMatchObject({
      manifest: 1,
      workflows: {
        'cli-checkout': { 1: ['charge.v1', 'confirm.v1', 'reserve.v1'] },
        'cli-gated': { 1: ['first.v1', 'second.v1'] },
        'cli-refusing': { 1: ['only.v1'] },
      },
      effects: ['cli.audit', 'cli.notify'],
    });
    expect(Object.keys(manifest.workflows)).toEqual(['cli-checkout', 'cli-gated', 'cli-refusing']);

    const passed = await check('cli-app');
    expect(passed.code).toBe(0);
    expect(passed.stdout).toMatch(/^check passed \(3 workflows/);
    expect((await check('cli-app', '--write')).stdout).toContain('is up to date');
  });

  it('fails on a renamed step and a removed effect, naming each, and refuses to write them', async () => {
    const before = await readFile(join(workDir(), 'stepkey.manifest.json'), 'utf8');
    const result = await check('cli-app-changed');
    expect(result.code).toBe(1);
    expect(result.stdout).toContain(
      "FAIL  workflow 'cli-checkout' version 1: step 'charge.v1' was renamed to 'charge.v2': a run that finished 'charge.v1' would run 'charge.v2' again.",
    );
    expect(result.stdout).toContain("FAIL  effect 'cli.audit' was removed");
    expect(result.stdout).toContain('check failed: 2 problems.');
    const json = (await check('cli-app-changed', '--json')).json();
    expect(json.problems.map((p: { kind: string }) => p.kind).sort()).toEqual(['effect_removed', 'step_removed']);
    expect(json.problems).toContainEqual(expect.objectContaining({ kind: 'step_removed', step: 'charge.v1', renamedTo: 'charge.v2' }));

    const refused = await check('cli-app-changed', '--write');
    expect(refused.code).toBe(1);
    expect(refused.stdout).toContain('Not written: 2 problems (fix them, or pass --force).');
    expect(await readFile(join(workDir(), 'stepkey.manifest.json'), 'utf8')).toBe(before);
  });

  it('passes when a version 2 is added beside version 1', async () => {
    const result = await check('cli-app-added');
    expect(result.code).toBe(0);
    expect(result.stdout).toContain("new   workflow 'cli-checkout' version 2 added");
    expect(result.stdout).toContain('1 addition: run `stepkey check --write` to record them.');
  });

  it('with a database, reports the live runs and jobs the change would strand', async () => {
    const scope = 'check-live';
    const failed = await failedCheckout(db(), scope);
    await completedCheckout(db(), scope);
    await enqueueEffect(db().sql, audit, { note: 'late' }, { scope, key: uniqueKey('audit') });
    const result = await online('cli-app-changed');
    expect(result.code).toBe(1);
    expect(result.stdout).toMatch(/FAIL {2}\d+ failed runs? of cli-checkout@1 recorded step 'charge\.v1', which that version no longer declares/);
    expect(result.stdout).toContain(`${scope} / ${failed}`);
    expect(result.stdout).toMatch(/FAIL {2}\d+ pending jobs? and 0 failed jobs of 'cli\.audit'/);
    expect(result.stdout).toMatch(/note {2}\d+ completed runs? of cli-checkout@1 recorded step 'charge\.v1'.*replays still work/);
    const json = (await online('cli-app-changed', '--json')).json();
    expect(json.orphans.live).toBeGreaterThanOrEqual(1);
    expect(json.orphans.runs).toContainEqual(
      expect.objectContaining({ kind: 'step_undeclared', workflow: 'cli-checkout', version: 1, step: 'charge.v1', status: 'failed', live: true }),
    );
    expect(json.orphans.jobs).toContainEqual(expect.objectContaining({ task: 'cli.audit', pending: 1 }));

    // The app as committed strands nothing.
    expect((await online('cli-app')).code).toBe(0);
  });

  it('writes a manifest with problems only with --force', async () => {
    const path = join(workDir(), 'forced.json');
    await writeFile(path, await readFile(join(workDir(), 'stepkey.manifest.json'), 'utf8'));
    const forced = await check('cli-app-changed', '--manifest', path, '--write', '--force');
    expect(forced.code).toBe(0);
    expect(forced.stdout).toContain('despite the problems above (--force)');
    expect(JSON.parse(await readFile(path, 'utf8')).workflows['cli-checkout']['1']).toEqual(['charge.v2', 'confirm.v1', 'reserve.v1']);
    const malformed = join(workDir(), 'bad.json');
    await writeFile(malformed, '{"manifest": 1}');
    const bad = await check('cli-app', '--manifest', malformed);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/is malformed: "effects" must be an array/);
  });
});
