/**
 * The shop's client of the payment service: one charge per call, sent with
 * the idempotency key the caller derived. A retryable answer (409, 429, 5xx, a
 * network error) throws an ordinary error, so the step retries; a 4xx is a
 * permanent refusal and throws a NonRetryableError.
 */
import { NonRetryableError } from '../../src/ledger/outcome.js';

export interface Charge {
  id: string;
  amountCents: number;
  currency: string;
  reference: string;
}

export interface ChargeRequest {
  amountCents: number;
  currency: string;
  reference: string;
}

export async function charge(
  baseUrl: string,
  merchant: string,
  request: ChargeRequest,
  options: { idempotencyKey: string; signal?: AbortSignal },
): Promise<Charge> {
  const response = await fetch(`${baseUrl}/v1/charges`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${merchant}`,
      'content-type': 'application/json',
      'idempotency-key': options.idempotencyKey,
    },
    body: JSON.stringify(request),
    ...(options.signal ? { signal: options.signal } : {}),
  });
  const text = await response.text();
  if (response.status === 201) return JSON.parse(text) as Charge;
  const retryable = response.status === 408 || response.status === 409 || response.status === 429 || response.status >= 500;
  const message = `payment service answered ${response.status}: ${text}`;
  if (retryable) throw new Error(message);
  throw new NonRetryableError(message, { code: `PAYMENT_${response.status}` });
}
