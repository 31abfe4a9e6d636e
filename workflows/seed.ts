/** Stock to sell. Inserting only what is missing keeps a restart from refilling shelves. */
import type { Database } from 'stepkey';
import { stock } from './db/schema.js';

export const catalogue = [
  { sku: 'sku-espresso', available: 1_000, priceCents: 250 },
  { sku: 'sku-grinder', available: 50, priceCents: 8_900 },
  { sku: 'sku-kettle', available: 3, priceCents: 4_500 },
];

export async function seed(database: Database): Promise<void> {
  await database.db.insert(stock).values(catalogue).onConflictDoNothing();
}
