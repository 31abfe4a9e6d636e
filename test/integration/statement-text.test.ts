import { describe, expect, it } from 'vitest';
import { Clock } from '../../src/db/clock.js';
import { SqlText, StatementText } from '../../src/db/statement-text.js';
import { useTestDatabase } from '../helpers/database.js';

const db = useTestDatabase();

describe('StatementText', () => {
  it('numbers values in the order they are added, splices SqlText, and sends them as one prepared statement', async () => {
    const b = new StatementText();
    b.sql`select ${'a'}::text as first`;
    b.sql`, ${new SqlText("'spliced'")}::text as second, ${2}::int + ${3}::int as sum, ${null}::text as nothing, ${true}::boolean as yes`;
    expect(b.text).toBe("select $1::text as first, 'spliced'::text as second, $2::int + $3::int as sum, $4::text as nothing, $5::boolean as yes");
    expect(b.params).toEqual(['a', 2, 3, null, true]);
    const [row] = await b.query<{ first: string; second: string; sum: number; nothing: null; yes: boolean }[]>(db().sql);
    expect(row).toEqual({ first: 'a', second: 'spliced', sum: 5, nothing: null, yes: true });
  });

  it("reads plain now() at clock offset 0, and one offset parameter however often the time is used", async () => {
    const still = new StatementText();
    const now = still.now(new Clock());
    still.sql`select ${now} = ${now} as same`;
    expect(still.text).toBe('select now() = now() as same');
    expect(still.params).toEqual([]);
    expect(await still.query<{ same: boolean }[]>(db().sql)).toEqual([{ same: true }]);
    // No parameters, and still a prepared (extended-protocol) statement: one that holds two is refused.
    const two = new StatementText();
    two.sql`select 1; select 2`;
    await expect(two.query(db().sql)).rejects.toMatchObject({ code: '42601' });

    const clock = new Clock();
    clock.advance(3_600_000);
    const moved = new StatementText();
    const later = moved.now(clock);
    moved.sql`select extract(epoch from (${later} - now()))::float8 as ahead_s, ${later} = ${later} as same, ${'x'}::text as tag`;
    expect(moved.params).toEqual([3_600_000, 'x']);
    expect(await moved.query<{ ahead_s: number; same: boolean; tag: string }[]>(db().sql)).toEqual([{ ahead_s: 3600, same: true, tag: 'x' }]);
  });

  it('fails with the server\'s error for a statement Postgres rejects', async () => {
    const b = new StatementText();
    b.sql`select ${'not a number'}::int`;
    await expect(b.query(db().sql)).rejects.toMatchObject({ code: '22P02' });
  });
});
