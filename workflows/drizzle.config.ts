import { defineConfig } from 'drizzle-kit';

export default defineConfig({
  dialect: 'postgresql',
  schema: './workflows/db/schema.ts',
  out: './workflows/db/migrations',
  schemaFilter: ['shop', 'payments'],
  migrations: { schema: 'shop', table: '__migrations' },
});
