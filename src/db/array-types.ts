/**
 * Array types for stepkey's postgres.js pools, registered once per pool
 * instead of fetched by every new connection.
 *
 * postgres.js 3.4 (fetch_types, its default) sends a query for the server's
 * array types as the first query of every connection it opens, from a promise
 * nobody handles: a backend terminated while that query is in flight (a
 * failover, pg_terminate_backend, a restart in a connection's first instants)
 * rejects it, and the process dies of an unhandled rejection
 * (`write CONNECTION_CLOSED`, or the backend's 57P01). So pools are created
 * with `fetch_types: false`, and the array types of PostgreSQL's built-in
 * types are registered here, exactly as postgres.js would register them after
 * its fetch. Their OIDs are fixed in the system catalog (pg_type.dat, below
 * 10000), the same on every server version. Arrays of types created in the
 * database (enums, domains, composites) come back as their text form, which
 * drizzle's array columns parse.
 */
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import type postgres from 'postgres';

type Parser = ((value: string) => unknown) & { array?: boolean };
type Serializer = (value: unknown) => unknown;

interface ArrayCodec {
  arrayParser(text: string, parser: Parser | undefined, typarray: number): unknown[];
  arraySerializer(values: unknown, serializer: Serializer | undefined, options: unknown, typarray: number): unknown;
}

/** The pool options postgres.js keeps and reads on every query (`sql.options`; not all in its types). */
interface PoolOptions {
  parsers: Record<number, Parser>;
  serializers: Record<number, Serializer>;
  shared: { typeArrayMap: Record<number, number> };
}

// postgres.js's own array text codec, so that arrays read and write exactly as after its fetch.
// Its package exports only the entry point; the codec is in the module beside it.
const require = createRequire(import.meta.url);
const codec = require(join(dirname(require.resolve('postgres')), 'types.js')) as ArrayCodec;

/** [element type OID, array type OID] of every built-in type, as `pg_type` lists them. */
export const builtinArrayTypes: readonly (readonly [number, number])[] = [
  [16, 1000], [17, 1001], [18, 1002], [19, 1003], [20, 1016], [21, 1005], [22, 1006], [23, 1007], [24, 1008],
  [25, 1009], [26, 1028], [27, 1010], [28, 1011], [29, 1012], [30, 1013], [71, 210], [75, 270], [81, 272],
  [83, 273], [114, 199], [142, 143], [600, 1017], [601, 1018], [602, 1019], [603, 1020], [604, 1027],
  [628, 629], [650, 651], [700, 1021], [701, 1022], [718, 719], [774, 775], [790, 791], [829, 1040],
  [869, 1041], [1033, 1034], [1042, 1014], [1043, 1015], [1082, 1182], [1083, 1183], [1114, 1115],
  [1184, 1185], [1186, 1187], [1266, 1270], [1560, 1561], [1562, 1563], [1700, 1231], [1790, 2201],
  [2202, 2207], [2203, 2208], [2204, 2209], [2205, 2210], [2206, 2211], [2275, 1263], [2950, 2951],
  [2970, 2949], [3220, 3221], [3614, 3643], [3615, 3645], [3642, 3644], [3734, 3735], [3769, 3770],
  [3802, 3807], [3904, 3905], [3906, 3907], [3908, 3909], [3910, 3911], [3912, 3913], [3926, 3927],
  [4072, 4073], [4089, 4090], [4096, 4097], [4191, 4192], [4451, 6150], [4532, 6151], [4533, 6152],
  [4534, 6153], [4535, 6155], [4536, 6157], [5038, 5039], [5069, 271],
];

/**
 * Registers the built-in array types on a pool created with
 * `fetch_types: false` — what postgres.js's per-connection fetch would have
 * registered (its addArrayType), without the fetch.
 */
export function registerArrayTypes(sql: postgres.Sql): void {
  const options = sql.options as unknown as PoolOptions;
  for (const [oid, typarray] of builtinArrayTypes) {
    if (options.parsers[typarray] && options.serializers[typarray]) continue;
    options.shared.typeArrayMap[oid] = typarray;
    // Element codecs are looked up on each call: drizzle replaces some (dates) after the pool is made.
    const parser: Parser = (text) => codec.arrayParser(text, options.parsers[oid], typarray);
    parser.array = true;
    options.parsers[typarray] = parser;
    options.serializers[typarray] = (values) => codec.arraySerializer(values, options.serializers[oid], options, typarray);
  }
}
