/**
 * A middleware that answers without calling next() must hand tRPC a result
 * object of its own. tRPC v11 does not document that shape (trpc/trpc#4066);
 * it is the one its resolver middleware returns. Kept here, in one place,
 * and covered by the replay tests.
 */
export function replayResult<Result>(ctx: object, data: unknown): Result {
  return { marker: 'middlewareMarker', ok: true, data, ctx } as unknown as Result;
}
