/**
 * The ledger's row invariants (stepkey.ledger_row_ok, migrations 0012 and
 * 0013): a write that breaks one is refused as a check violation that names
 * the row and the invariant, and writes nothing; the rows stepkey writes pass.
 * A step row is refused too: steps are recorded in stepkey.steps.
 */
import { describe, expect, it } from 'vitest';
import { useTestDatabase } from '../helpers/database.js';
import { uniqueKey } from '../helpers/ledger.js';

const db = useTestDatabase();

/** A row's columns, from a valid finished request, with `change` applied. */
function row(change: Record<string, unknown>) {
  return {
    scope: 'acme',
    key: uniqueKey('inv'),
    kind: 'request',
    fingerprint: 'fp',
    status: 'completed',
    outcome: '1',
    outcome_ok: true,
    ...change,
  };
}

async function insert(values: Record<string, unknown>): Promise<unknown> {
  const sql = db().sql;
  return sql`insert into stepkey.ledger ${sql(values as Record<string, string>)}`.then(
    () => undefined,
    (error: unknown) => error,
  );
}

describe('the ledger’s row invariants', () => {
  it.each([
    ['an unknown kind', { kind: 'thing' }, /kind 'thing' is not request, run or effect/],
    ['a step', { kind: 'step', parent_key: 'run' }, /steps are recorded in stepkey.steps since migration 0013; a process of an earlier stepkey is still running/],
    ['an unknown status', { status: 'done' }, /status 'done' is not in_progress, waiting/],
    ['an unknown wait kind', { kind: 'run', status: 'waiting', outcome: null, outcome_ok: null, wait_kind: 'nap' }, /wait_kind 'nap' is not timer/],
    ['a row in progress without a lease', { status: 'in_progress', outcome: null, outcome_ok: null }, /a row in progress needs a lease/],
    ['a finished row without its outcome', { outcome: null }, /a completed row needs an outcome/],
    ['an unfinished row with an outcome', { status: 'failed' }, /a failed row cannot have an outcome/],
    ['a waiting row with a lease', { kind: 'run', status: 'waiting', outcome: null, outcome_ok: null, wait_kind: 'timer', locked_until: new Date().toISOString() }, /a waiting row is a run with a wait_kind, no lease/],
    ['a waiting row that is not a run', { status: 'waiting', outcome: null, outcome_ok: null, wait_kind: 'timer' }, /a waiting row is a run/],
    ['a request with an input', { input: '{}' }, /only a run carries a version and an input \(this row is a request\)/],
  ])('refuses %s, naming the row and the invariant', async (_what, change, message) => {
    const values = row(change);
    const error = (await insert(values)) as { code?: string; constraint_name?: string; message?: string } | undefined;
    expect(error).toMatchObject({ code: '23514', constraint_name: 'ledger_row_check', schema_name: 'stepkey', table_name: 'ledger' });
    expect(error!.message).toMatch(message);
    expect(error!.message).toContain(`(acme, ${values.key as string})`);
    const [found] = await db().sql`select 1 from stepkey.ledger where scope = 'acme' and key = ${values.key as string}`;
    expect(found).toBeUndefined();
  });

  it('refuses an update that breaks one, keeping the row as it was', async () => {
    const values = row({});
    expect(await insert(values)).toBeUndefined();
    const error = await db().sql`update stepkey.ledger set outcome = null where scope = 'acme' and key = ${values.key}`.catch((e: unknown) => e);
    expect(error).toMatchObject({ code: '23514', constraint_name: 'ledger_row_check' });
    const [kept] = await db().sql`select outcome from stepkey.ledger where scope = 'acme' and key = ${values.key}`;
    expect(kept).toEqual({ outcome: '1' });
  });

  it('lets each kind of row stepkey writes through', async () => {
    const lease = { lease_token: '00000000-0000-4000-8000-000000000001', locked_until: new Date(Date.now() + 60_000).toISOString() };
    for (const change of [
      {},
      { kind: 'run', status: 'in_progress', outcome: null, outcome_ok: null, version: 1, input: '{}', ...lease },
      { kind: 'run', status: 'waiting', outcome: null, outcome_ok: null, version: 1, input: '{}', wait_kind: 'timer' },
      { kind: 'run', status: 'failed', outcome: null, outcome_ok: null, version: 1, input: '{}' },
      { kind: 'request', status: 'cancelled', outcome: '"stop"', outcome_ok: false },
      { kind: 'effect', status: 'in_progress', outcome: null, outcome_ok: null, ...lease },
    ]) {
      expect(await insert(row(change))).toBeUndefined();
    }
  });
});
