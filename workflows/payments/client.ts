/**
 * The shop's client of the payment service: one charge per call, sent with
 * the idempotency key the caller derived. A retryable answer (409, 429, 5xx, a
 * network error) throws an ordinary error, so the step retries; a 4xx is a
 * permanent refusal and throws a NonRetryableError.
 */
import { NonRetryableError } from 'stepkey';

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

/**
 * The charge an earlier request with this idempotency key made, or undefined
 * if it made none: how the checkout reconciles a charge whose answer it never
 * got (its process died after sending it). A failure to ask throws, and the
 * step asks again.
 */
export async function findCharge(
  baseUrl: string,
  merchant: string,
  idempotencyKey: string,
  options: { signal?: AbortSignal } = {},
): Promise<Charge | undefined> {
  const response = await fetch(`${baseUrl}/v1/charges?idempotencyKey=${encodeURIComponent(idempotencyKey)}`, {
    headers: { authorization: `Bearer ${merchant}` },
    ...(options.signal ? { signal: options.signal } : {}),
  });
  const text = await response.text();
  if (response.status !== 200) throw new Error(`payment service answered ${response.status} to a lookup: ${text}`);
  return (JSON.parse(text) as { charges: Charge[] }).charges[0];
}
