/** Citus's node errors are the database being unavailable (retryable), never a stored failure. */
import { describe, expect, it } from 'vitest';
import { translateDatabaseError } from '../../src/errors/pg-errors.js';

const citusError = (code: string, message: string) => Object.assign(new Error(message), { code });

describe('Citus node errors', () => {
  it('answers a worker unreachable (08006) and a connection lost mid-transaction (XX000) as database_unavailable', () => {
    for (const error of [
      citusError('08006', 'connection to the remote node postgres@127.0.0.1:5643 failed with the following error: Connection refused'),
      citusError('XX000', 'connection to the remote node 127.0.0.1:5642 failed'),
      citusError('XX000', 'failure on connection marked as essential: 127.0.0.1:5642'),
    ]) {
      const translated = translateDatabaseError(error, 'completing a run');
      expect(translated.code).toBe('database_unavailable');
      expect(translated.retryable).toBe(true);
    }
  });

  it('keeps any other internal error a database error', () => {
    expect(translateDatabaseError(citusError('XX000', 'cache lookup failed for relation 1'), 'reading').code).toBe('database_error');
  });
});
