/**
 * openPool (postgres.js alone, what the CLI's reads use) and connect (the
 * same pool with drizzle on it) read rows alike: the type parsers drizzle
 * sets on a pool it is given are the ones openPool sets without it.
 */
import postgres from 'postgres';
import { drizzle } from 'drizzle-orm/postgres-js';
import { describe, expect, it } from 'vitest';
import { openPool } from '../../src/db/pool.js';

const url = 'postgres://nobody@127.0.0.1:1/none';

describe('openPool', () => {
  it('sets the parsers and serializers drizzle sets, without drizzle', async () => {
    const pool = openPool(url);
    // A bare postgres.js pool with drizzle's own construction, for reference.
    const bare = postgres(url, { onnotice: () => {} });
    const plain = { parsers: { ...bare.options.parsers }, serializers: { ...bare.options.serializers } };
    drizzle({ client: bare });
    const changed = (which: 'parsers' | 'serializers') =>
      Object.keys(bare.options[which]).filter((type) => bare.options[which][type as never] !== plain[which][type as never]);
    expect(changed('parsers').length).toBeGreaterThan(0);
    for (const which of ['parsers', 'serializers'] as const) {
      for (const type of changed(which)) {
        const value = '2026-12-06 02:50:00+00';
        expect(pool.sql.options[which][type as never] as (v: string) => unknown, `${which}[${type}]`).toBeTypeOf('function');
        expect((pool.sql.options[which][type as never] as (v: string) => unknown)(value), `${which}[${type}]`).toBe(value);
      }
    }
    await Promise.all([pool.close(), bare.end()]);
  });
});
