/**
 * What every keyed call goes through before anything is claimed, whatever
 * carries it (a tRPC procedure, an HTTP route): one well-formed key, not in a
 * batch of several operations, from an identified caller. The refusals are
 * 400 (naming the header) and 401 (anonymous callers never share a scope).
 */
import { IDEMPOTENCY_KEY_HEADER, parseIdempotencyKey } from './header.js';
import { Refusal } from './refusal.js';

export interface KeyedRequest {
  key: string;
  scope: string;
}

export interface KeySource {
  /** Every line of the Idempotency-Key header as received (or the joined value). */
  headerValues: readonly string[];
  /** The caller's scope, read only once the key is known to be well formed. */
  scope: () => string | null | undefined;
  /** 'optional': a call without the header is not keyed (undefined). */
  mode: 'required' | 'optional';
  /** How many operations the request carries (a tRPC batch); 1 if absent. */
  operations?: number;
}

/** The call's key and scope, undefined when an optional key is absent; refusals are thrown. */
export function readKeyedRequest(source: KeySource): KeyedRequest | undefined {
  const values = source.headerValues;
  if (values.length === 0 && source.mode === 'optional') return undefined;
  const operations = source.operations ?? 1;
  if (values.length > 0 && operations > 1) {
    throw new Refusal(
      400,
      `This batched request carries one ${IDEMPOTENCY_KEY_HEADER} for ${operations} operations; send each keyed mutation in a request of its own.`,
    );
  }
  const parsed = parseIdempotencyKey(values);
  if (!parsed.ok) throw new Refusal(400, parsed.message);
  const scope = source.scope();
  if (!scope) {
    throw new Refusal(
      401,
      `An ${IDEMPOTENCY_KEY_HEADER} needs an identified caller: keys are scoped per caller, and anonymous callers never share one.`,
    );
  }
  return { key: parsed.key, scope };
}
