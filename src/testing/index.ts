/**
 * stepkey/testing: tools to prove exactly-once for your own code.
 *
 *   armFaults / faultPoint   kill the process with SIGKILL at a named point
 *   spawnScript              run a file in a child process you can SIGKILL
 */
export { armFaults, disarmFaults, faultPoint, faultPoints, type FaultPoint } from '../faults/fault-points.js';
export { spawnScript, type ChildHandle, type ChildExit, type SpawnOptions } from './child-process.js';
export { processAlive } from '../embedded/process-alive.js';
