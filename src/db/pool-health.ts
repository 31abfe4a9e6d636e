/**
 * What a pool's connections have been through, for tests, the chaos suite and
 * operators: how many transactions hold a reserved connection now, and
 * whether any of them holds one it can no longer use — the signs of a pool
 * that lost connections after its backends went away (see socket.ts and
 * transaction.ts for the ways postgres.js 3.4 can lose them, and what stepkey
 * does about each).
 */
import type postgres from 'postgres';

export interface PoolHealth {
  /** Connection attempts that closed having sent nothing (a slot whose write batch went stale; see socket.ts). */
  muteConnects: number;
  /** Times a connection was found serving two transactions at once (both were ended, the connection closed). */
  sharedConnections: number;
  /** Transactions holding a reserved connection now. */
  readonly held: Set<HeldReservation>;
}

/** A transaction's view of its reservation, as the pool's health reads it. */
export interface HeldReservation {
  /** Marked dead (its connection closed or went to another) and still holding the pool's reservation. */
  holdsDeadReservation(): boolean;
}

/** A snapshot of a pool's health. */
export interface PoolHealthSnapshot {
  /** Reserved connections held by transactions now. */
  reservations: number;
  /** Of those, reservations held by transactions marked dead: connections the pool will not see again. */
  deadReservations: number;
  muteConnects: number;
  sharedConnections: number;
}

const pools = new WeakMap<postgres.Sql, PoolHealth>();

export function newPoolHealth(): PoolHealth {
  return { muteConnects: 0, sharedConnections: 0, held: new Set() };
}

/** Registers the health record of a pool made by connect(). */
export function trackPool(pool: postgres.Sql, health: PoolHealth): void {
  pools.set(pool, health);
}

/** The health record of a pool (one made on first use for a pool connect() did not make). */
export function healthOf(pool: postgres.Sql): PoolHealth {
  let health = pools.get(pool);
  if (!health) {
    health = newPoolHealth();
    pools.set(pool, health);
  }
  return health;
}

/** What a pool's connections have been through so far (the pool of a Database: `database.sql`). */
export function poolHealth(pool: postgres.Sql): PoolHealthSnapshot {
  const health = healthOf(pool);
  let deadReservations = 0;
  for (const held of health.held) if (held.holdsDeadReservation()) deadReservations += 1;
  return {
    reservations: health.held.size,
    deadReservations,
    muteConnects: health.muteConnects,
    sharedConnections: health.sharedConnections,
  };
}
