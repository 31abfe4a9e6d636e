/** Where `npm start` records what it runs, for `npm run demo` and for tests. */
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export interface RunningApp {
  supervisor: number;
  api: number;
  worker: number;
  payments: number;
  postgres: number | null;
  apiUrl: string;
  paymentsUrl: string;
  databaseUrl: string;
}

export const stateFile = (dataDir: string) => join(dataDir, 'processes.json');

export function writeState(dataDir: string, state: RunningApp): void {
  writeFileSync(stateFile(dataDir), `${JSON.stringify(state, null, 2)}\n`);
}

export function readState(dataDir: string): RunningApp {
  try {
    return JSON.parse(readFileSync(stateFile(dataDir), 'utf8')) as RunningApp;
  } catch {
    throw new Error(`No running app found (${stateFile(dataDir)} is missing): start it with \`npm start\` first.`);
  }
}

export function clearState(dataDir: string): void {
  rmSync(stateFile(dataDir), { force: true });
}
