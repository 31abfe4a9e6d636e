/**
 * Limits spell slots per partition as queues do — `perPartition: { concurrency }`
 * beside `partitionBy` — and `concurrency` alone bounds the whole limit. The
 * spelling of earlier releases, `concurrency` beside `partitionBy` (which
 * meant slots per partition), is refused with an error naming the new one,
 * never read as either meaning; by type too.
 */
import { describe, expect, it } from 'vitest';
import { defineLimit } from '../../src/flow/define-limit.js';
import { defineQueue } from '../../src/flow/define-queue.js';
import { expectRefused } from '../helpers/refused.js';

const refused = (make: () => unknown, pattern: RegExp) => expectRefused(make, pattern, 'definition_error');

describe('slots per partition of a limit', () => {
  it('are spelled perPartition: { concurrency }, as a queue’s; concurrency alone bounds the whole limit', () => {
    const perMerchant = defineLimit<{ merchant: string }>({
      name: 'spell-merchant',
      rateLimit: { limit: 100, periodMs: 1_000 },
      partitionBy: (input) => input.merchant,
      perPartition: { concurrency: 20 },
    });
    expect(perMerchant).toMatchObject({ concurrency: 20, rateLimit: { limit: 100, periodMs: 1_000 } });
    expect(perMerchant.partitionBy!({ merchant: 'm-7' }, { scope: 's', key: 'k', step: 'charge.v1' })).toBe('m-7');
    expect(defineLimit({ name: 'spell-whole', concurrency: 4 })).toMatchObject({ concurrency: 4, partitionBy: undefined });
    // A rate per partition alone (no slots) stays as it was.
    expect(defineLimit({ name: 'spell-rate', rateLimit: { limit: 5, periodMs: 1_000 }, partitionBy: () => 'a' }).concurrency).toBeNull();
    // The same words as a queue's.
    expect(defineQueue({ name: 'spell-queue', concurrency: 5, partitionBy: () => 'a', perPartition: { concurrency: 2 } }).perPartition).toBe(2);
  });

  it('refuses the old spelling — concurrency beside partitionBy — naming perPartition', () => {
    refused(
      // @ts-expect-error: the old spelling is refused by type too
      () => defineLimit({ name: 'old', concurrency: 3, partitionBy: () => 'a' }),
      /Limit 'old': concurrency: 3 beside partitionBy is the old spelling of slots per partition; write perPartition: \{ concurrency: 3 \} \(as a queue does\)/,
    );
    refused(
      () => defineLimit({ name: 'old', rateLimit: { limit: 5, periodMs: 1_000 }, concurrency: 3, partitionBy: () => 'a', perPartition: { concurrency: 3 } } as never),
      /concurrency: 3 beside partitionBy is the old spelling/,
    );
  });

  it('refuses perPartition without partitionBy, and a bad perPartition.concurrency, naming the field and the value', () => {
    // @ts-expect-error: perPartition needs a partitionBy, by type too
    refused(() => defineLimit({ name: 'x', perPartition: { concurrency: 2 } }), /Limit 'x': perPartition needs a partitionBy; for slots over the whole limit write concurrency: 2/);
    refused(() => defineLimit({ name: 'x', partitionBy: () => 'a', perPartition: { concurrency: 0 } }), /Limit 'x': perPartition.concurrency must be a whole number above 0, got 0/);
    refused(() => defineLimit({ name: 'x', partitionBy: () => 'a', perPartition: { concurrency: 1.5 } }), /perPartition.concurrency must be a whole number above 0, got 1.5/);
    refused(() => defineLimit({ name: 'x', partitionBy: () => 'a', perPartition: {} as never }), /perPartition.concurrency must be a whole number above 0, got undefined/);
    refused(() => defineLimit({ name: 'x', partitionBy: () => 'a' }), /give it a rateLimit \(\{ limit, periodMs \}\), a concurrency \(perPartition: \{ concurrency \} with partitionBy\), or both/);
  });
});
