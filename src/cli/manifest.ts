/**
 * The step-name contract between deploys: a JSON manifest, committed to the
 * app's repository, listing every workflow → version → step names, and every
 * effect name, in sorted order (so that it diffs cleanly).
 *
 *   {
 *     "$comment": "…",
 *     "manifest": 1,
 *     "workflows": { "checkout": { "1": ["charge-card.v1", "reserve-inventory.v1"] } },
 *     "effects": ["email.send"]
 *   }
 *
 * A run records each finished step under its name and is resumed by its
 * version's definition: a version that disappears strands its runs, and a
 * step renamed inside a version runs again (a second charge). Adding is safe.
 */
import { existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import type { Effect } from '../outbox/effect.js';
import type { Workflow } from '../workflow/define.js';
import { CliFailure } from './errors.js';

export interface Manifest {
  workflows: Record<string, Record<string, string[]>>;
  effects: string[];
}

export const MANIFEST_FORMAT = 1;
export const defaultManifestFile = 'stepkey.manifest.json';

const comment =
  'stepkey step-name contract, written by `stepkey check --write`. Commit it. `stepkey check` fails when a ' +
  'workflow version, a step name within a version, or an effect disappears. Change steps in a new version.';

const byText = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

export function buildManifest(workflows: readonly Workflow[], effects: readonly Effect[]): Manifest {
  const built: Manifest = { workflows: {}, effects: [...new Set(effects.map((effect) => effect.name))].sort(byText) };
  for (const workflow of [...workflows].sort((a, b) => byText(a.name, b.name) || a.version - b.version)) {
    const versions = (built.workflows[workflow.name] ??= {});
    versions[String(workflow.version)] = Object.values(workflow.steps).map((step) => step.name).sort(byText);
  }
  return built;
}

/** Stable text: keys and names sorted, two-space indent, trailing newline. */
export function serializeManifest(manifest: Manifest): string {
  const workflows: Record<string, Record<string, string[]>> = {};
  for (const name of Object.keys(manifest.workflows).sort(byText)) {
    const versions = manifest.workflows[name]!;
    workflows[name] = {};
    for (const version of Object.keys(versions).sort((a, b) => Number(a) - Number(b))) {
      workflows[name][version] = [...versions[version]!].sort(byText);
    }
  }
  const body = { $comment: comment, manifest: MANIFEST_FORMAT, workflows, effects: [...manifest.effects].sort(byText) };
  return `${JSON.stringify(body, null, 2)}\n`;
}

/** The manifest at `path`, or undefined if there is no file yet. */
export async function readManifest(path: string): Promise<Manifest | undefined> {
  if (!existsSync(path)) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(await readFile(path, 'utf8'));
  } catch (error) {
    throw new CliFailure('manifest_invalid', `The manifest '${path}' is not valid JSON: ${(error as Error).message}`);
  }
  const invalid = (why: string) =>
    new CliFailure('manifest_invalid', `The manifest '${path}' is malformed: ${why}. Regenerate it with \`stepkey check --write\`.`);
  const candidate = parsed as Partial<Manifest> & { manifest?: unknown };
  if (!candidate || typeof candidate !== 'object') throw invalid('not an object');
  if (candidate.manifest !== MANIFEST_FORMAT) throw invalid(`"manifest" must be ${MANIFEST_FORMAT}`);
  if (!Array.isArray(candidate.effects) || !candidate.effects.every((name) => typeof name === 'string')) {
    throw invalid('"effects" must be an array of names');
  }
  if (!candidate.workflows || typeof candidate.workflows !== 'object') throw invalid('"workflows" must be an object');
  for (const [name, versions] of Object.entries(candidate.workflows)) {
    if (!versions || typeof versions !== 'object') throw invalid(`workflow '${name}' must map versions to step names`);
    for (const [version, steps] of Object.entries(versions)) {
      if (!/^[1-9]\d*$/.test(version)) throw invalid(`workflow '${name}' has a version '${version}' that is not a positive whole number`);
      if (!Array.isArray(steps) || !steps.every((step) => typeof step === 'string')) {
        throw invalid(`workflow '${name}' version ${version} must list step names`);
      }
    }
  }
  return { workflows: candidate.workflows, effects: candidate.effects };
}

export async function writeManifest(path: string, manifest: Manifest): Promise<void> {
  await writeFile(path, serializeManifest(manifest), 'utf8');
}

export function countManifest(manifest: Manifest): { workflows: number; versions: number; steps: number; effects: number } {
  const versions = Object.values(manifest.workflows).flatMap((byVersion) => Object.values(byVersion));
  return {
    workflows: Object.keys(manifest.workflows).length,
    versions: versions.length,
    steps: versions.reduce((sum, steps) => sum + steps.length, 0),
    effects: manifest.effects.length,
  };
}
