/**
 * The job payload of an effect: the message's derived key, its scope, the
 * validated payload and, with tracing, the trace context it was enqueued in. The key is what consumers dedupe on. The payload travels
 * as JSON and is parsed again on every delivery, so an envelope is built only
 * for a payload whose JSON form passes the effect's schema too.
 */
import { StepkeyError } from '../errors/stepkey-error.js';
import { toJsonText } from '../ledger/outcome.js';
import { summarise } from '../workflow/values.js';
import type { Effect } from './effect.js';
import { activeTraceContext } from '../telemetry/tracing.js';

export interface Envelope {
  /** Message key. */
  k: string;
  /** Scope. */
  s: string;
  /** Payload. */
  p: unknown;
  /**
   * The job's max_attempts before a permanent failure lowered it: written into
   * the job by failJobForGood, read back by retryJobs. Absent otherwise.
   */
  m?: number;
  /**
   * The W3C trace context active where the effect was enqueued (see
   * telemetry/tracing.ts): its delivery's span continues it. Absent without
   * an OpenTelemetry SDK.
   */
  t?: string;
}

/**
 * Validates `payload` against the effect's schema and returns the job payload
 * as JSON text. Guarantee: what it returns is what delivery will accept — the
 * payload read back from that text passes the schema, as consume() parses it.
 */
export function envelopeText(effect: Effect, key: string, scope: string, payload: unknown): string {
  const parsed = effect.payload.safeParse(payload);
  if (!parsed.success) {
    throw new StepkeyError(
      'invalid_input',
      `The payload of effect '${effect.name}' is invalid: ${summarise(parsed.error)}. Nothing was enqueued.`,
      { cause: parsed.error },
    );
  }
  const trace = activeTraceContext();
  const envelope: Envelope = trace ? { k: key, s: scope, p: parsed.data, t: trace } : { k: key, s: scope, p: parsed.data };
  const text = toJsonText(envelope, `payload of effect '${effect.name}'`);
  const delivered = effect.payload.safeParse((JSON.parse(text) as Envelope).p);
  if (!delivered.success) {
    throw new StepkeyError(
      'invalid_input',
      `The payload of effect '${effect.name}' does not survive JSON: it is stored as JSON and parsed again on delivery, ` +
        `and its JSON form fails the schema (${summarise(delivered.error)}), so every delivery would fail. ` +
        'A payload schema must accept its own output in JSON form (for dates use dateField(); a transform’s result must pass the schema again). ' +
        'Nothing was enqueued.',
      { cause: delivered.error },
    );
  }
  return text;
}

export function readEnvelope(raw: unknown): Envelope | undefined {
  if (!raw || typeof raw !== 'object') return undefined;
  const { k, s, p, t } = raw as Partial<Envelope>;
  if (typeof k !== 'string' || typeof s !== 'string') return undefined;
  return typeof t === 'string' ? { k, s, p, t } : { k, s, p };
}
