/** An engine on the test file's database, with its own clock and a short lease. */
import { Clock } from '../../src/db/clock.js';
import type { Workflow } from '../../src/workflow/define.js';
import { Engine, type EngineOptions } from '../../src/workflow/engine.js';
import type { TestDatabase } from './database.js';

export function testEngine(db: TestDatabase, workflows: Workflow[], options: Partial<EngineOptions> = {}): Engine {
  return new Engine({
    database: db,
    workflows,
    clock: new Clock(),
    leaseMs: 2_000,
    sweepIntervalMs: 100,
    // STEPKEY_TEST_ENGINE_ERRORS=1 prints what the engine reports (silent otherwise: many tests provoke errors).
    onError: process.env.STEPKEY_TEST_ENGINE_ERRORS ? (error, context) => console.error(`engine error: ${context}`, error) : () => {},
    ...options,
  });
}
