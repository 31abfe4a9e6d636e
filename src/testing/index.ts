/**
 * stepkey/testing: tools to prove exactly-once for your own workflows.
 *
 *   crashTest                runs your workflow with a SIGKILL at each fault point in turn,
 *                            resumes it, checks each effect you name happened once, and
 *                            counts how many times each callee saw each key
 *   defineCrashScenario      what the kit's child processes run
 *   armFaults / faultPoint   kill the process with SIGKILL at a named point
 *   onFaultPoint             run a function there instead, in this process
 *   spawnScript              run a file in a child process you can SIGKILL
 */
export {
  crashTest,
  faultPointsOf,
  type CalleeCount,
  type CalleeSpec,
  type CrashReport,
  type CrashTestOptions,
  type CountedRun,
  type FaultOutcome,
} from './crash-kit.js';
export { defineCrashScenario, type CrashScenario } from './scenario.js';
export { armFaults, disarmFaults, faultPoint, faultPoints, onFaultPoint, type FaultPoint } from '../faults/fault-points.js';
export { spawnScript, type ChildHandle, type ChildExit, type SpawnOptions } from './child-process.js';
export { processAlive } from '../embedded/process-alive.js';
