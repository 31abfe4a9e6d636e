/**
 * An engine on the test file's database, with its own clock and a lease that
 * does not run out while a test works, however busy the host: a test that
 * needs a lease expired moves the engine's clock past it.
 */
import { afterEach } from 'vitest';
import { Clock } from '../../src/db/clock.js';
import type { Workflow } from '../../src/workflow/define.js';
import { Engine, type EngineOptions } from '../../src/engine/engine.js';
import type { TestDatabase } from './database.js';
import { LONG_LEASE_MS } from './patience.js';

export function testEngine(db: TestDatabase, workflows: Workflow[], options: Partial<EngineOptions> = {}): Engine {
  return new Engine({
    database: db,
    workflows,
    clock: new Clock(),
    leaseMs: LONG_LEASE_MS,
    sweepIntervalMs: 100,
    // STEPKEY_TEST_ENGINE_ERRORS=1 prints what the engine reports (silent otherwise: many tests provoke errors).
    onError: process.env.STEPKEY_TEST_ENGINE_ERRORS ? (error, context) => console.error(`engine error: ${context}`, error) : () => {},
    ...options,
  });
}

/**
 * `engineFor(workflows, options)` for a test file: each engine it makes is
 * shut down after the test that made it, `beforeShutdown` first (the test's
 * gates opened, so that no execution waits on one).
 */
export function enginesShutAfterEach(db: () => TestDatabase, beforeShutdown: () => void = () => {}) {
  const engines: Engine[] = [];
  afterEach(async () => {
    beforeShutdown();
    await Promise.all(engines.splice(0).map((e) => e.shutdown({ timeoutMs: 5_000 })));
  });
  return (workflows: Workflow[], options: Partial<EngineOptions> = {}): Engine => {
    const made = testEngine(db(), workflows, options);
    engines.push(made);
    return made;
  };
}
