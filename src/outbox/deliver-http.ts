/**
 * Delivering an effect over HTTP, as the receiver's Idempotency-Key client
 * (with the delivery's trace context in the headers, through the app's
 * OpenTelemetry propagator, when it has one):
 *
 *   2xx (a replay included)           delivered
 *   408, 409, 429, 5xx, network error, timeout
 *                                     retryable: the job is retried with backoff
 *   any other 4xx                     permanent: the job fails for good
 */
import { NonRetryableError } from '../ledger/outcome.js';
import { StepkeyError } from '../errors/stepkey-error.js';
import { injectTraceHeaders } from '../telemetry/tracing.js';

export interface DeliverOptions {
  /** The message key, sent as Idempotency-Key. */
  key: string;
  method?: 'POST' | 'PUT';
  headers?: Record<string, string>;
  timeoutMs?: number;
  signal?: AbortSignal;
}

export interface Delivered {
  status: number;
  body: string;
  replayed: boolean;
}

export async function deliverHttp(url: string, body: unknown, options: DeliverOptions): Promise<Delivered> {
  const signals = [AbortSignal.timeout(options.timeoutMs ?? 10_000), ...(options.signal ? [options.signal] : [])];
  let response: Response;
  try {
    response = await fetch(url, {
      method: options.method ?? 'POST',
      headers: injectTraceHeaders({ 'content-type': 'application/json', ...options.headers, 'idempotency-key': options.key }),
      body: JSON.stringify(body),
      signal: AbortSignal.any(signals),
    });
  } catch (error) {
    throw new StepkeyError('delivery_failed', `Delivery to ${url} failed: ${(error as Error).message}`, { cause: error });
  }
  const text = await response.text();
  if (response.ok) return { status: response.status, body: text, replayed: response.headers.get('idempotent-replayed') === 'true' };
  const retryable = [408, 409, 429].includes(response.status) || response.status >= 500;
  const message = `Delivery to ${url} answered ${response.status}: ${text.slice(0, 500)}`;
  if (retryable) throw new StepkeyError('delivery_failed', message, { details: { status: response.status } });
  throw new NonRetryableError(message, { code: `HTTP_${response.status}`, data: { status: response.status } });
}
