/** The app module of call-crash.ts's workflows, for `stepkey resolve --app` (payments at $CALL_CRASH_PAYMENTS_URL). */
import { callCrash, variants } from './call-crash.js';

export const workflows = variants.map((variant) => callCrash(process.env.CALL_CRASH_PAYMENTS_URL ?? 'http://127.0.0.1:9', variant));
