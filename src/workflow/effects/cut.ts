/**
 * Whether a failed call attempt may still have reached the callee: it was cut
 * short rather than answered. Such an attempt's outcome is unknown.
 *
 *   aborted      its timeout fired, or the run had to stop (its signal)
 *   connection   the connection went after the request may have left: reset,
 *                broken pipe, closed socket, a read timeout
 *   marked       the error says so itself (`unknownOutcome: true`)
 *
 * A refused connection or an unknown host never reached anyone: those
 * attempts failed.
 */
const lostConnection = new Set([
  'ECONNRESET',
  'EPIPE',
  'ECONNABORTED',
  'ETIMEDOUT',
  'UND_ERR_SOCKET',
  'UND_ERR_CLOSED',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
  'CONNECTION_CLOSED',
  'CONNECTION_DESTROYED',
]);

export function wasCut(error: unknown, signal: AbortSignal): boolean {
  if (signal.aborted) return true;
  let current: unknown = error;
  for (let depth = 0; depth < 6 && current && typeof current === 'object'; depth += 1) {
    const { code, unknownOutcome, name } = current as { code?: unknown; unknownOutcome?: unknown; name?: unknown };
    if (unknownOutcome === true) return true;
    if (name === 'AbortError' || name === 'TimeoutError') return true;
    if (typeof code === 'string' && lostConnection.has(code)) return true;
    current = (current as { cause?: unknown }).cause;
  }
  return false;
}
