/**
 * Builds the dashboard's browser app into dist/dashboard-ui (`npm run build`):
 * Preact, bundled and minified, relative URLs (the server sets <base>), no
 * external requests.
 */
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

export default defineConfig({
  root: fileURLToPath(new URL('./src/dashboard/ui', import.meta.url)),
  base: './',
  logLevel: 'warn',
  publicDir: false,
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: {
    outDir: fileURLToPath(new URL('./dist/dashboard-ui', import.meta.url)),
    emptyOutDir: true,
    assetsInlineLimit: 0,
    modulePreload: false,
    sourcemap: false,
    target: 'es2022',
  },
});
