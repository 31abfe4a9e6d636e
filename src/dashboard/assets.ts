/**
 * The dashboard's browser app: built by vite at build time into
 * dist/dashboard-ui (index.html and hashed files under assets/), shipped in
 * the package, served from memory. No CDN, nothing built at the user's.
 *
 * Found next to the compiled code (dist/dashboard → dist/dashboard-ui), or,
 * running from source, in the repository's dist/.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export interface Bundle {
  dir: string;
  index: string;
  files: Map<string, { body: Uint8Array; type: string }>;
}

const types: Record<string, string> = {
  js: 'text/javascript; charset=utf-8',
  css: 'text/css; charset=utf-8',
  svg: 'image/svg+xml',
  png: 'image/png',
  ico: 'image/x-icon',
  woff2: 'font/woff2',
  map: 'application/json; charset=utf-8',
};

/** Where the bundle is looked for, first match wins. */
export function bundleCandidates(): string[] {
  return [new URL('../dashboard-ui/', import.meta.url), new URL('../../dist/dashboard-ui/', import.meta.url)].map((url) => fileURLToPath(url));
}

export function findBundleDir(): string | undefined {
  return bundleCandidates().find((dir) => existsSync(`${dir}index.html`));
}

/** Loads the bundle, or undefined when it has not been built. */
export function loadBundle(dir = findBundleDir()): Bundle | undefined {
  if (!dir) return undefined;
  const files = new Map<string, { body: Uint8Array; type: string }>();
  const assets = `${dir}assets/`;
  if (existsSync(assets)) {
    for (const name of readdirSync(assets)) {
      const type = types[name.split('.').pop() ?? ''];
      if (type && /^[\w.-]+$/.test(name)) files.set(name, { body: readFileSync(`${assets}${name}`), type });
    }
  }
  return { dir, index: readFileSync(`${dir}index.html`, 'utf8'), files };
}

/** The page, with the base every relative URL of the app resolves against. */
export function indexHtml(bundle: Bundle, basePath: string): string {
  const base = basePath.endsWith('/') ? basePath : `${basePath}/`;
  return bundle.index.replace('<head>', `<head><base href="${escapeAttribute(base)}">`);
}

function escapeAttribute(text: string): string {
  return text.replace(/[&"<>]/g, (c) => ({ '&': '&amp;', '"': '&quot;', '<': '&lt;', '>': '&gt;' })[c]!);
}
