/**
 * Events: a run waits for an event on a topic and holds nothing meanwhile;
 * `send` keeps events in a mailbox per (run, topic), first in, first out,
 * keyed by the sender's key; each is consumed once; a timeout and an event
 * decide once; bad input is refused before anything is stored.
 */
import { describe, expect, expectTypeOf, it } from 'vitest';
import { z } from 'zod';
import { defineWorkflow, step } from '../../src/workflow/define.js';
import type { EventReceived, EventTimedOut } from '../../src/workflow/handles.js';
import { useTestDatabase } from '../helpers/database.js';
import { testEngine } from '../helpers/engine.js';
import { uniqueKey } from '../helpers/ledger.js';

const db = useTestDatabase({ max: 20 });

const approvalEvents = {
  approved: z.object({ by: z.string(), at: z.iso.datetime().transform((text) => new Date(text)) }),
  comment: z.object({ text: z.string() }),
};

const approval = defineWorkflow({
  name: 'events-approval',
  version: 1,
  input: z.object({ doc: z.string() }),
  events: approvalEvents,
  steps: { approval: step('approval.v1'), note: step('note.v1') },
  async run({ steps }) {
    const got = await steps.approval.waitForEvent('approved');
    expectTypeOf(got).toEqualTypeOf<EventReceived<{ by: string; at: Date }>>();
    return { by: got.payload.by, at: got.payload.at.toISOString(), key: got.key };
  },
});

const twoComments = defineWorkflow({
  name: 'events-comments',
  version: 1,
  input: z.object({}),
  events: { comment: z.object({ text: z.string() }) },
  steps: { comment: step('comment.v1') },
  async run({ steps }) {
    const first = await steps.comment.waitForEvent('comment', { id: 'first' });
    const second = await steps.comment.waitForEvent('comment', { id: 'second' });
    return [first.payload.text, second.payload.text];
  },
});

const deadline = defineWorkflow({
  name: 'events-deadline',
  version: 1,
  input: z.object({}),
  events: { approved: z.object({ by: z.string() }) },
  steps: { approval: step('approval.v1') },
  async run({ steps }) {
    const got = await steps.approval.waitForEvent('approved', { timeoutMs: 60_000 });
    expectTypeOf(got).toEqualTypeOf<EventReceived<{ by: string }> | EventTimedOut>();
    return got.type === 'event' ? `approved by ${got.payload.by}` : 'timed out';
  },
});

const stamp = (by: string) => ({ by, at: new Date('2026-12-01T10:00:00Z').toISOString() });
const status = async (ref: { scope: string; key: string }) =>
  (await db().sql`select status from stepkey.ledger where scope = ${ref.scope} and key = ${ref.key}`)[0]?.status as string;
const mailbox = async (ref: { scope: string; key: string }) =>
  db().sql`select topic, sender_key, consumed_by is not null as consumed from stepkey.mailbox
            where scope = ${ref.scope} and run_key = ${ref.key} order by seq`;

describe('waitForEvent', () => {
  it('parks until its event is sent, then wakes promptly in the sending process and consumes it once', async () => {
    const engine = testEngine(db(), [approval]);
    const ref = { scope: 'acme', key: uniqueKey('approve') };
    const handle = await engine.start(approval, ref, { doc: 'd-1' });
    await expect.poll(() => status(ref)).toBe('waiting');
    expect((await engine.get(ref))!.wait).toMatchObject({ kind: 'event', step: 'approval.v1', for: 'approved', until: null });
    const sent = await engine.send(handle, 'approved', stamp('ada'), { key: 'approval-1' });
    expect(sent).toMatchObject({ delivered: true });
    await expect(handle.result()).resolves.toEqual({ by: 'ada', at: '2026-12-01T10:00:00.000Z', key: 'approval-1' });
    expect(await mailbox(ref)).toEqual([{ topic: 'approved', sender_key: 'approval-1', consumed: true }]);
    // The run has ended: it takes no more events, and nothing is stored.
    await expect(engine.send(handle, 'approved', stamp('eve'), { key: 'approval-2' })).rejects.toMatchObject({ code: 'run_ended' });
    expect(await mailbox(ref)).toHaveLength(1);
    await engine.shutdown();
  });

  it('keeps events sent before the run reaches its wait, first in, first out', async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const early = defineWorkflow({
      name: 'events-early',
      version: 1,
      input: z.object({}),
      events: { comment: z.object({ text: z.string() }) },
      steps: { busy: step('busy.v1'), comment: step('comment.v1') },
      async run({ steps }) {
        await steps.busy.call(() => gate);
        const first = await steps.comment.waitForEvent('comment', { id: 'a' });
        const second = await steps.comment.waitForEvent('comment', { id: 'b' });
        return [first.payload.text, second.payload.text];
      },
    });
    const engine = testEngine(db(), [early]);
    const ref = { scope: 'acme', key: uniqueKey('early') };
    const handle = await engine.start(early, ref, {});
    await engine.send(handle, 'comment', { text: 'one' }, { key: 'k1' });
    await engine.send(handle, 'comment', { text: 'two' }, { key: 'k2' });
    release();
    await expect(handle.result()).resolves.toEqual(['one', 'two']);
    await engine.shutdown();
  });

  it('delivers one event for ten concurrent sends with one key; another payload under it is a mismatch', async () => {
    const engine = testEngine(db(), [twoComments]);
    const ref = { scope: 'acme', key: uniqueKey('dupes') };
    const handle = await engine.start(twoComments, ref, {});
    await expect.poll(() => status(ref)).toBe('waiting');
    const sends = await Promise.all(
      Array.from({ length: 10 }, () => engine.send(handle, 'comment', { text: 'same' }, { key: 'one-key' })),
    );
    expect(sends.filter((s) => s.delivered)).toHaveLength(1);
    expect(new Set(sends.map((s) => s.seq)).size).toBe(1);
    await expect(engine.send(handle, 'comment', { text: 'other' }, { key: 'one-key' })).rejects.toMatchObject({ code: 'mismatch' });
    // The first wait consumed it; the second still waits.
    await expect.poll(async () => (await engine.get(ref))!.wait?.step).toBe('comment.v1[second]');
    expect(await mailbox(ref)).toEqual([{ topic: 'comment', sender_key: 'one-key', consumed: true }]);
    await engine.send(handle, 'comment', { text: 'next' }, { key: 'two-key' });
    await expect(handle.result()).resolves.toEqual(['same', 'next']);
    await engine.shutdown();
  });

  it('refuses a payload that fails its schema, an undeclared topic, an unknown run; keeps events for a failed run', async () => {
    const engine = testEngine(db(), [approval]);
    const ref = { scope: 'acme', key: uniqueKey('refuse') };
    const handle = await engine.start(approval, ref, { doc: 'd-2' });
    await expect.poll(() => status(ref)).toBe('waiting');
    const badPayload = await engine.send(handle, 'approved', { by: 42 } as never, { key: 'bad' }).catch((e: unknown) => e);
    expect(badPayload).toMatchObject({ code: 'invalid_input' });
    expect((badPayload as Error).message).toMatch(/payload of event 'approved' is invalid: by: .*nothing was stored/);
    const badTopic = await engine.send(ref, 'rejected', {}, { key: 'bad-topic' }).catch((e: unknown) => e);
    expect((badTopic as Error).message).toMatch(/declares no event 'rejected' \(declared: approved, comment\)/);
    await expect(engine.send({ scope: 'acme', key: uniqueKey('nobody') }, 'approved', stamp('x'), { key: 'k' })).rejects.toMatchObject({
      code: 'run_not_found',
    });
    await expect(engine.send(handle, 'approved', stamp('x'), { key: '' })).rejects.toMatchObject({ code: 'invalid_key' });
    expect(await mailbox(ref)).toEqual([]);

    // A failed run (resumable) keeps what it is sent.
    await db().sql`update stepkey.ledger set status = 'failed', last_error = '{"name":"Error","message":"x"}',
                     expires_at = now() + interval '1 day', wait_kind = null
                   where scope = ${ref.scope} and key = ${ref.key}`;
    expect(await engine.send(handle, 'approved', stamp('ada'), { key: 'kept' })).toMatchObject({ delivered: true });
    expect(await mailbox(ref)).toEqual([{ topic: 'approved', sender_key: 'kept', consumed: false }]);
    await engine.shutdown();
  });
});

describe('a timeout', () => {
  it('is the outcome when it comes first, recorded once; an event sent later finds the run ended', async () => {
    const engine = testEngine(db(), [deadline]);
    const ref = { scope: 'acme', key: uniqueKey('timeout') };
    const startedAt = Date.now();
    const handle = await engine.start(deadline, ref, {});
    await expect.poll(() => status(ref)).toBe('waiting');
    // Due a minute after it began waiting (a second allowed for the database's clock against this host's).
    expect((await engine.get(ref))!.wait!.until!.getTime()).toBeGreaterThanOrEqual(startedAt + 59_000);
    engine.clock.advance(61_000);
    expect(await engine.sweep()).toBe(1);
    await expect(handle.result()).resolves.toBe('timed out');
    await expect(engine.send(handle, 'approved', { by: 'late' }, { key: 'late' })).rejects.toMatchObject({ code: 'run_ended' });
    expect(await engine.attempt(deadline, ref, {})).toMatchObject({ state: 'completed', output: 'timed out', replayed: true });
    await engine.shutdown();
  });

  it('and an event at the same instant decide once: the recorded outcome wins on every replay', async () => {
    const engine = testEngine(db(), [deadline]);
    const ref = { scope: 'acme', key: uniqueKey('race') };
    const handle = await engine.start(deadline, ref, {});
    await expect.poll(() => status(ref)).toBe('waiting');
    // Both due: the deadline passed and an event arrives; two sweepers race for it.
    const other = testEngine(db(), [deadline]);
    engine.clock.advance(61_000);
    other.clock.advance(61_000);
    // The send may come after a sweep has already ended the run on its timeout: then it is refused,
    // and nothing is stored.
    const sending = engine.send(handle, 'approved', { by: 'ada' }, { key: 'on-time' }).then(
      () => 'sent',
      (error: unknown) => {
        if ((error as { code?: string }).code !== 'run_ended') throw error;
        return 'refused';
      },
    );
    const [sent] = await Promise.all([sending, engine.sweep(), other.sweep()]);
    await expect.poll(() => status(ref)).toBe('completed');
    const info = (await engine.get(ref))!;
    const recorded = JSON.parse(info.steps.find((s) => s.name === 'approval.v1')!.output!);
    if (sent === 'refused') expect(recorded.type).not.toBe('event');
    const expected = recorded.type === 'event' ? 'approved by ada' : 'timed out';
    for (let replay = 0; replay < 3; replay += 1) {
      expect(await engine.attempt(deadline, ref, {})).toMatchObject({ state: 'completed', output: expected });
    }
    const consumed = (await mailbox(ref)).filter((m) => m.consumed);
    expect(consumed).toHaveLength(recorded.type === 'event' ? 1 : 0);
    await engine.shutdown();
    await other.shutdown();
  });
});
