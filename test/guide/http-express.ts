// test/guide/http-express.ts — charges on Express, keyed with stepkey/http
import express from 'express';
import { z } from 'zod';
import { connect, Ledger } from 'stepkey';
import { createNodeIdempotency } from 'stepkey/http';

const database = connect(process.env.DATABASE_URL!);
const idempotency = createNodeIdempotency<express.Request, express.Response>({
  ledger: new Ledger({ sql: database.sql }),
  // Keys are scoped per caller: here the tenant the authentication below found. None: 401.
  scope: (_req, res) => res.locals.tenant as string | undefined,
});

const charge = z.object({
  amountCents: z.number().int().positive(),
  currency: z.string().length(3),
});

const app = express();
app.use((req, res, next) => {
  // Your real authentication.
  res.locals.tenant = /^Bearer (\w+)$/.exec(req.get('authorization') ?? '')?.[1];
  next();
});
// Optional: the handler reads the raw body itself, or fingerprints the JSON this parsed.
app.use(express.json());

app.post(
  '/v1/charges',
  idempotency.handler({ route: 'charges.create' }, async (_req, { body, idempotency }) => {
    const { key, scope, sql } = idempotency;
    const input = charge.safeParse(body.json);
    // A 4xx is stored and replayed like a success; its writes (none here) roll back.
    if (!input.success) {
      return { status: 400, body: { error: 'invalid charge', issues: input.error.issues } };
    }
    // Writes through `sql` (or `db`, drizzle) commit with the stored answer, in one transaction.
    const [row] = await sql`
      insert into charges (tenant, idempotency_key, amount_cents, currency)
      values (${scope}, ${key}, ${input.data.amountCents}, ${input.data.currency})
      returning id`;
    return {
      status: 201,
      headers: { location: `/v1/charges/${row!.id}` },
      body: { id: Number(row!.id), ...input.data },
    };
  }),
);

app.listen(3000);
