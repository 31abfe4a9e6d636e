/**
 * The size of the event sender's load (sender.ts), shared by the process and
 * the checks that read its outcome from the database.
 */
export const SENDER_RUNS = 50;
export const EVENTS_PER_RUN = 13;
export const SENDER_SCOPE = 'chaos-events';
export const senderWorkflowName = 'chaos-event-waiter';

/** What the sender prints when it stops. */
export interface SenderFinal {
  answered: number;
  total: number;
  refusals: Record<string, number>;
  health: { reservations: number; deadReservations: number; muteConnects: number; sharedConnections: number };
}
