/**
 * What must hold of the event sender's load (sender.ts) once the app has
 * settled: every send answered, every event received by its wait (each run
 * completed, every message consumed once), and a pool that came through the
 * restarts whole — no reservation of a dead transaction held, no connection
 * handed to two transactions, no connection attempt that went out mute.
 */
import { connect } from '../../src/db/connect.js';
import { EVENTS_PER_RUN, SENDER_RUNS, SENDER_SCOPE, type SenderFinal } from './sender-load.js';

export async function senderFailures(databaseUrl: string, final: SenderFinal | undefined): Promise<string[]> {
  const failures: string[] = [];
  if (!final) failures.push('the sender said nothing when it stopped');
  else {
    if (final.answered !== final.total) {
      failures.push(`the sender had ${final.answered} of ${final.total} sends answered (refused meanwhile: ${JSON.stringify(final.refusals)})`);
    }
    const { deadReservations, sharedConnections, muteConnects } = final.health;
    if (deadReservations > 0) failures.push(`the sender's pool held ${deadReservations} reservation(s) of dead transactions`);
    if (sharedConnections > 0) failures.push(`the sender's pool handed ${sharedConnections} connection(s) to two transactions`);
    if (muteConnects > 0) failures.push(`the sender's pool made ${muteConnects} connection attempt(s) that sent nothing`);
  }
  const { sql, close } = connect(databaseUrl, { max: 1, applicationName: 'chaos-checker' });
  try {
    const [runs] = await sql<{ completed: number; total: number }[]>`
      select count(*) filter (where status = 'completed')::int as completed, count(*)::int as total
        from stepkey.ledger where scope = ${SENDER_SCOPE} and kind = 'run'`;
    if (runs!.total !== SENDER_RUNS || runs!.completed !== SENDER_RUNS) {
      failures.push(`${runs!.completed} of the sender's ${SENDER_RUNS} runs completed (${runs!.total} found)`);
    }
    const [mail] = await sql<{ consumed: number; total: number }[]>`
      select count(*) filter (where consumed_by is not null)::int as consumed, count(*)::int as total
        from stepkey.mailbox where scope = ${SENDER_SCOPE}`;
    const expected = SENDER_RUNS * EVENTS_PER_RUN;
    if (mail!.total !== expected || mail!.consumed !== expected) {
      failures.push(`the sender's mailbox holds ${mail!.total} events (${mail!.consumed} received), not ${expected} received once each`);
    }
  } finally {
    await close();
  }
  return failures;
}
