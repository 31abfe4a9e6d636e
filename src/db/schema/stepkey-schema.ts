/** The Postgres schema all of stepkey's tables live in, and the timestamp column type they share. */
import { pgSchema, timestamp } from 'drizzle-orm/pg-core';

export const stepkeySchema = pgSchema('stepkey');

export const at = (name: string) => timestamp(name, { withTimezone: true, mode: 'string' });
