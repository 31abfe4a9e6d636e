/**
 * The router's data transformer, as the idempotency option needs it: results
 * are stored in the transformer's serialised form, so that a replay goes
 * through the same serialisation as the first answer and comes out byte for
 * byte the same. A middleware cannot see the router's transformer: pass it in.
 */
export interface DataTransformerLike {
  serialize(value: unknown): unknown;
  deserialize(value: unknown): unknown;
}

export type TransformerOption = DataTransformerLike | { input: DataTransformerLike; output: DataTransformerLike };

const identity: DataTransformerLike = { serialize: (value) => value, deserialize: (value) => value };

/** The transformer applied to procedure outputs. */
export function outputTransformer(option: TransformerOption | undefined): DataTransformerLike {
  if (!option) return identity;
  return 'output' in option ? option.output : option;
}
