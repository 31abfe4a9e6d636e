/**
 * The error a parent's `child()` step gets when its child run did not
 * complete: it errored (a stored deterministic error), its retries ran out
 * (failed — the child itself stays resumable), it was cancelled, or its
 * deadline passed (deadline_exceeded). It is
 * recorded as the parent step's outcome and thrown again, the same, on every
 * replay.
 */
import { NonRetryableError, type StoredError } from '../../ledger/outcome.js';

export type ChildEnd = 'errored' | 'failed' | 'cancelled' | 'deadline_exceeded';

export interface ChildRunErrorData {
  child: { scope: string; key: string; workflow: string };
  status: ChildEnd;
  error: StoredError;
}

export class ChildRunError extends NonRetryableError {
  override name = 'ChildRunError';
  readonly child: ChildRunErrorData['child'];
  readonly status: ChildEnd;
  readonly error: StoredError;

  constructor(data: ChildRunErrorData) {
    super(`Child run '${data.child.key}' of workflow '${data.child.workflow}' ${data.status}: ${data.error.message}`, {
      code: `child_${data.status}`,
      data,
    });
    this.child = data.child;
    this.status = data.status;
    this.error = data.error;
  }
}

export function isChildRunErrorData(value: unknown): value is ChildRunErrorData {
  const data = value as Partial<ChildRunErrorData> | null;
  return !!data && typeof data === 'object' && !!data.child && typeof data.status === 'string' && !!data.error;
}
