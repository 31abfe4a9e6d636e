/** What the stepkey CLI loads for this app (`stepkey worker|check|resume --app workflows/stepkey.config.ts`). */
import { checkout } from './checkout.js';
import { exampleMigrations } from './db/migrate.js';
import { sendConfirmation } from './effects.js';

export const workflows = [checkout];
export const effects = [sendConfirmation];
export const migrations = [exampleMigrations];
