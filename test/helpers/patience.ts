/**
 * How long tests wait. A test asserts what happens — exactly once, nothing
 * lost, a state reached — never how fast: on a shared CI host with every core
 * busy, anything can take many times longer than on an idle one. So every
 * bound a test sets is minutes, and a lease never runs out by accident while
 * a test works: where a test needs time to pass (a lease to expire, a timer
 * to come due), it moves the injected clock (`Clock.advance`).
 */

/** How long a test waits for something that must happen eventually (polls, child processes, drains). */
export const PATIENCE_MS = 180_000;

/** A lease (a run's, a worker pool's) that only a moved clock expires during a test. */
export const LONG_LEASE_MS = 600_000;
