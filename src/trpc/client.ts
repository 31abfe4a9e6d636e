/**
 * stepkey/trpc/client: the client side alone — the link that gives each
 * mutation one Idempotency-Key and retries it with that key. It loads nothing
 * of the server (no Postgres driver, no drizzle), so browser bundles and
 * clients of another process can import it.
 */
export { DEFAULT_RETRY_FOR_MS, idempotencyLink, idempotencyHeaders, isRetryableError, type IdempotencyLinkOptions } from './link.js';
export { IDEMPOTENCY_KEY_HEADER } from '../idempotency/header.js';
