/** The example app's folders. */
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const projectRoot = fileURLToPath(new URL('../..', import.meta.url));

/** npm start's data (embedded PostgreSQL, processes.json): STEPKEY_DATA_DIR or .stepkey/app. */
export const dataDir = () => process.env.STEPKEY_DATA_DIR ?? join(projectRoot, '.stepkey', 'app');
