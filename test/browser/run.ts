/**
 * `npm run test:browser`: the dashboard in a real browser — Debian's
 * Chromium (/usr/bin/chromium, or CHROMIUM) driven by playwright-core —
 * against a real stepkey with real runs (app.ts). It loads each page,
 * follows a run from the list, looks a key up, retries a failed job and
 * watches it succeed, cancels a run, resumes a failed one, checks that
 * markup in an input and an error is shown as text, watches a queue's
 * depth, slots and rate and a queued run's place in line, and measures the
 * database statements ten open tabs cost. Screenshots go to
 * .stepkey/screenshots/. Bounded: it gives up after BROWSER_TEST_TIMEOUT_MS
 * (default 540 000); each wait for what must appear is generous (WAIT_MS), so
 * that a busy host fails nothing only for being slow.
 */
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import postgres from 'postgres';
import { findBundleDir } from '../../src/dashboard/assets.js';
import { childKey } from '../../src/keys/derive.js';
import { startBrowserApp, type BrowserApp } from './app.js';
import { batch, batches, flaky, hostile, order, reminder, slow } from './shop.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const shots = join(root, '.stepkey', 'screenshots');
const executablePath = process.env.CHROMIUM ?? '/usr/bin/chromium';
const deadline = Number(process.env.BROWSER_TEST_TIMEOUT_MS ?? 540_000);
/** How long a page, or the app, is waited for something that must happen. */
const WAIT_MS = 120_000;
const scope = 'acme';

const checks: string[] = [];
const pass = (what: string) => {
  checks.push(what);
  console.log(`  ok  ${what}`);
};

async function main(): Promise<void> {
  if (!existsSync(executablePath)) throw new Error(`No Chromium at ${executablePath}: apt-get install -y chromium (or set CHROMIUM).`);
  if (!findBundleDir()) throw new Error("The dashboard's bundle is not built: npm run build:dashboard.");
  mkdirSync(shots, { recursive: true });
  const app = await startBrowserApp(root);
  const profile = mkdtempSync(join(tmpdir(), 'stepkey-chromium-'));
  let context: BrowserContext | undefined;
  try {
    await makeRuns(app);
    context = await chromium.launchPersistentContext(profile, {
      executablePath,
      headless: true,
      viewport: { width: 1366, height: 860 },
      args: ['--no-sandbox', '--headless', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
    const page = context.pages()[0] ?? (await context.newPage());
    page.setDefaultTimeout(WAIT_MS);
    const errors: string[] = [];
    page.on('pageerror', (error) => errors.push(error.message));
    page.on('console', (message) => {
      // The 401 and 403 the test provokes on purpose (a wrong token, an action without CSRF) are expected.
      if (message.type() === 'error' && !/Failed to load resource: .* (401|403) /.test(message.text())) errors.push(message.text());
    });
    await runsPage(page, app);
    await hostilePage(page, app);
    await followRun(page);
    await lookUpKey(page, app);
    await signIn(page, app);
    await retryJob(page, app);
    await cancelRun(page);
    await resumeRun(page, app);
    await workersPage(page);
    await queuesPage(page, app);
    await keyboard(page);
    await measureTabs(context, app);
    if (errors.length) throw new Error(`the page reported errors:\n${errors.join('\n')}`);
    console.log(`\n${checks.length} passed, 0 failed (screenshots in ${shots})`);
  } finally {
    await context?.close().catch(() => {});
    rmSync(profile, { recursive: true, force: true });
    await app.stop();
  }
}

const keys = { first: 'order-1001', second: 'order-1002', mail: 'order-1003', slow: 'export-7', flaky: 'refund-42', hostile: 'note-<b>9</b>', reminder: 'remind-ada' };

async function makeRuns(app: BrowserApp): Promise<void> {
  const { engine } = app;
  await app.setSwitch('mail-down', false);
  await engine.run(order, { scope, key: keys.first }, { item: 'espresso beans', cents: 1_250, email: 'ada@example.com' });
  await engine.run(order, { scope, key: keys.second }, { item: 'grinder', cents: 8_900, email: 'grace@example.com' });
  // Their emails are delivered before the mail server goes down for the third order's.
  for (let started = Date.now(); Number((await app.database.sql`select count(*)::int as n from browser_mail`)[0]!.n) < 2; ) {
    if (Date.now() - started > WAIT_MS) throw new Error('the first two emails were not delivered');
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  await app.setSwitch('mail-down', true);
  await engine.run(order, { scope: 'globex', key: keys.mail }, { item: 'kettle', cents: 4_500, email: 'linus@example.com' });
  await app.setSwitch('payments-down', true);
  await engine.run(flaky, { scope, key: keys.flaky }, { cents: 300 }).catch(() => undefined);
  await engine.run(hostile, { scope, key: keys.hostile }, { note: `<script>window.__xss = 'input'</script><img src=x onerror="window.__xss='img'">` }).catch(() => undefined);
  await engine.start(reminder, { scope, key: keys.reminder }, { to: 'ada@example.com' });
  await expectStatus(app, keys.reminder, 'waiting');
  await engine.start(slow, { scope, key: keys.slow }, { job: 'nightly' });
}

async function expectStatus(app: BrowserApp, key: string, status: string): Promise<void> {
  for (let started = Date.now(); (await app.engine.get({ scope, key }))?.status !== status; ) {
    if (Date.now() - started > WAIT_MS) throw new Error(`run ${key} did not become ${status}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

async function runsPage(page: Page, app: BrowserApp): Promise<void> {
  await page.goto(app.dashboardUrl);
  await page.getByRole('heading', { name: 'Runs' }).waitFor();
  await page.getByRole('link', { name: keys.first }).waitFor();
  for (const key of Object.values(keys)) await page.getByRole('cell', { name: key, exact: true }).waitFor();
  await page.getByRole('row', { name: new RegExp(keys.reminder) }).getByText('waiting', { exact: true }).waitFor();
  pass('the runs page lists every run, the waiting one as waiting');
  await page.getByLabel('Status').selectOption('failed');
  await page.getByRole('button', { name: 'Show' }).click();
  await page.getByRole('link', { name: keys.first }).waitFor({ state: 'detached' });
  await page.getByRole('link', { name: keys.flaky }).waitFor();
  // Ended by a stored error: errored, named apart from failed.
  await page.getByRole('link', { name: keys.hostile }).waitFor({ state: 'detached' });
  await page.getByLabel('Status').selectOption('errored');
  await page.getByRole('button', { name: 'Show' }).click();
  await page.getByRole('link', { name: keys.hostile }).waitFor();
  await page.getByRole('link', { name: keys.flaky }).waitFor({ state: 'detached' });
  pass('the status filter narrows the list (failed and errored apart)');
  await page.getByRole('link', { name: 'Clear' }).click();
  await page.getByLabel('Workflow').selectOption('order');
  await page.getByRole('button', { name: 'Show' }).click();
  await page.getByRole('link', { name: keys.mail }).waitFor();
  await page.getByRole('link', { name: 'Clear' }).click();
  await page.getByRole('link', { name: keys.first }).waitFor();
  await page.screenshot({ path: join(shots, 'runs.png') });
}

async function hostilePage(page: Page, app: BrowserApp): Promise<void> {
  await page.goto(`${app.dashboardUrl}#/run?scope=${scope}&key=${encodeURIComponent(keys.hostile)}`);
  await page.getByText("window.__xss = 'error'", { exact: false }).first().waitFor();
  const shown = await page.locator('pre').allTextContents();
  if (!shown.some((text) => text.includes("<script>window.__xss = 'input'</script>"))) throw new Error('the input was not shown as text');
  if (!shown.some((text) => text.includes('<img src=x onerror='))) throw new Error('the error was not shown as text');
  const injected = await page.evaluate<{ xss: unknown; scripts: number }>("({ xss: window.__xss, scripts: document.querySelectorAll('main script, main img').length })");
  if (injected.xss !== undefined || injected.scripts !== 0) throw new Error(`markup ran: ${JSON.stringify(injected)}`);
  await page.getByRole('heading', { name: `Run ${keys.hostile}` }).waitFor();
  pass('markup in an input, an error and a key is shown as text and never runs');
}

async function followRun(page: Page): Promise<void> {
  await page.getByRole('link', { name: 'Runs', exact: true }).click();
  await page.getByRole('link', { name: keys.first }).click();
  await page.getByRole('heading', { name: `Run ${keys.first}` }).waitFor();
  for (const step of ['reserve-stock.v1', 'charge-card.v1', 'send-confirmation.v1', 'mark-paid.v1']) {
    await page.locator('.waterfall').getByText(step).waitFor();
  }
  await page.locator('details.step', { hasText: 'charge-card.v1' }).locator('summary').click();
  await page.getByText('payments/demo').first().waitFor();
  await page.evaluate('window.scrollTo(0, 0)');
  await page.screenshot({ path: join(shots, 'dashboard.png') });
  await page.locator('details.step', { hasText: 'send-confirmation.v1' }).locator('summary').click();
  await page.getByText("Delivered to consumer").first().waitFor();
  await page.screenshot({ path: join(shots, 'run.png'), fullPage: true });
  pass('a run from the list shows its steps as a waterfall, the downstream charge and the delivery');
}

async function lookUpKey(page: Page, app: BrowserApp): Promise<void> {
  const run = await app.engine.get({ scope, key: keys.first });
  const chargeKey = childKey(run!.rootKey, 'charge-card.v1');
  await page.getByRole('link', { name: 'Key lookup' }).click();
  await page.getByLabel(/^Key/).fill(chargeKey);
  await page.getByRole('button', { name: 'Look up' }).click();
  await page.getByText('Each key reached each downstream ledger at most once.').first().waitFor();
  await page.getByRole('heading', { name: /request .* in scope payments\/demo/ }).waitFor();
  await page.screenshot({ path: join(shots, 'key.png'), fullPage: true });
  pass('a key lookup by the charge key finds the step and the one charge downstream');
}

/** In the page: an action sent as a script elsewhere on the page could, without the CSRF header. */
const postRetry = `fetch('api/actions/retry', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"ids":["1"]}' }).then((r) => r.status)`;

async function signIn(page: Page, app: BrowserApp): Promise<void> {
  await page.getByRole('link', { name: 'Outbox' }).click();
  if (await page.getByRole('button', { name: 'Retry' }).count()) throw new Error('actions are offered before signing in');
  const refused = await page.evaluate<number>(postRetry);
  if (refused !== 401) throw new Error(`an action without the token answered ${refused}`);
  await page.getByLabel('Access token').fill('not-the-token-at-all');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('alert').filter({ hasText: 'not the access token' }).waitFor();
  await page.getByLabel('Access token').fill(app.token);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByText('Signed in · actions on').waitFor();
  const forged = await page.evaluate<number>(postRetry);
  if (forged !== 403) throw new Error(`an action without the CSRF header answered ${forged}`);
  pass('actions need the token and the CSRF header');
}

async function retryJob(page: Page, app: BrowserApp): Promise<void> {
  await page.locator('.tabs').getByRole('link', { name: /^failed/ }).click();
  const row = page.getByRole('row', { name: /email\.send/ });
  await row.waitFor();
  await page.screenshot({ path: join(shots, 'outbox.png'), fullPage: true });
  await app.setSwitch('mail-down', false);
  await row.getByRole('button', { name: 'Retry' }).click();
  const dialog = page.getByRole('dialog');
  await dialog.getByRole('heading', { name: /Retry job #\d+/ }).waitFor();
  await dialog.getByRole('button', { name: 'Yes, retry' }).click();
  await page.getByText('No failed jobs.').waitFor({ timeout: WAIT_MS });
  await page.goto(`${app.dashboardUrl}#/run?scope=globex&key=${keys.mail}`);
  await page.locator('details.step', { hasText: 'send-confirmation.v1' }).locator('summary').click();
  await page.getByText('Delivered to consumer').first().waitFor({ timeout: WAIT_MS });
  pass('a failed job retried from the outbox is delivered');
}

async function cancelRun(page: Page): Promise<void> {
  await page.getByRole('link', { name: 'Runs', exact: true }).click();
  await page.getByRole('link', { name: keys.slow }).click();
  await page.locator('.facts .chip').getByText('running', { exact: true }).waitFor();
  await page.getByRole('button', { name: 'Cancel run' }).click();
  const dialog = page.getByRole('dialog');
  await dialog.getByLabel(/Reason/).fill('customer withdrew the export');
  await page.screenshot({ path: join(shots, 'cancel-dialog.png') });
  await dialog.getByRole('button', { name: 'Yes, cancel run' }).click();
  await page.locator('.facts .chip').getByText('cancelled', { exact: true }).waitFor({ timeout: WAIT_MS });
  await page.getByRole('cell', { name: /reason: customer withdrew the export/ }).waitFor();
  pass('a running run cancelled from its page is cancelled, with an audit row');
}

async function resumeRun(page: Page, app: BrowserApp): Promise<void> {
  await app.setSwitch('payments-down', false);
  await page.goto(`${app.dashboardUrl}#/run?scope=${scope}&key=${keys.flaky}`);
  await page.locator('.facts .chip').getByText('failed', { exact: true }).waitFor();
  await page.getByRole('button', { name: 'Resume' }).click();
  await page.getByRole('dialog').getByRole('button', { name: 'Yes, resume' }).click();
  await page.locator('.facts .chip').getByText('completed', { exact: true }).waitFor({ timeout: WAIT_MS });
  pass("a failed run resumed from its page is completed by the worker's sweeper");
}

async function workersPage(page: Page): Promise<void> {
  await page.getByRole('link', { name: 'Workers' }).click();
  await page.getByRole('cell', { name: 'alive' }).waitFor();
  await page.getByRole('cell', { name: 'retry job' }).first().waitFor();
  await page.screenshot({ path: join(shots, 'workers.png'), fullPage: true });
  pass('the workers page shows the live pool and the latest actions');
}

/** The queues page: depth and slots per partition, live; a queued run's place in line on the runs list and its page; the rate once they run. */
async function queuesPage(page: Page, app: BrowserApp): Promise<void> {
  await app.setSwitch('batches-go', false);
  // Two slots, one per tenant: a-0 and b-0 run, a-1 and a-2 wait in tenant a's line.
  for (const [tenant, n] of [['a', 0], ['b', 0], ['a', 1], ['a', 2]] as const) {
    await app.engine.enqueue(batch, { scope, key: `batch-${tenant}-${n}` }, { tenant, n }, { queue: batches });
  }
  await page.getByRole('link', { name: 'Queues' }).click();
  await page.getByRole('heading', { name: 'Queues', level: 1 }).waitFor();
  const partitions = page.getByRole('table', { name: 'Partitions of queue batches' });
  const row = (partition: string) => partitions.getByRole('row', { name: new RegExp(`^${partition} `) });
  await row('a').getByRole('cell').nth(1).getByText('2', { exact: true }).waitFor();
  await row('a').getByRole('cell').nth(2).getByText('1', { exact: true }).waitFor();
  await row('b').getByRole('cell').nth(2).getByText('1', { exact: true }).waitFor();
  await page.getByText('concurrency 2, 1 per partition · 2 waiting · 2 running').waitFor();
  // The header's counts follow on their own poll: the two runs holding the slots are running there too.
  await page.getByRole('list', { name: 'Open runs' }).getByRole('link', { name: 'running 2' }).waitFor();
  await page.screenshot({ path: join(shots, 'queues.png'), fullPage: true });
  pass('the queues page shows each partition\'s depth and slots held, linked from the nav');

  await page.goto(`${app.dashboardUrl}#/runs?status=waiting`);
  await page.getByRole('row', { name: /batch-a-2/ }).getByText('waits for a slot: queue batches · a, #2 of 2').waitFor();
  await page.getByRole('link', { name: 'batch-a-1' }).click();
  await page.getByText('batches · partition a · priority 0 · #1 of 2 waiting in its partition (2 in the queue)').waitFor();
  await page.screenshot({ path: join(shots, 'queued-run.png'), fullPage: true });
  pass("a queued run's place in line shows on the runs list and on its page");

  // Live: once the runs go, the page follows them to zero and counts their starts.
  await page.getByRole('link', { name: 'Queues' }).click();
  await page.getByRole('heading', { name: 'Queues', level: 1 }).waitFor();
  await app.setSwitch('batches-go', true);
  for (const tenant of ['a', 'b']) {
    await row(tenant).getByRole('cell').nth(1).getByText('0', { exact: true }).waitFor({ timeout: WAIT_MS });
    await row(tenant).getByRole('cell').nth(2).getByText('0', { exact: true }).waitFor({ timeout: WAIT_MS });
  }
  await row('a').getByRole('cell').nth(4).getByText('3', { exact: true }).waitFor();
  const rate = Number(await row('a').getByRole('cell').nth(3).textContent());
  if (!(rate > 0)) throw new Error(`the queues page showed a rate of ${rate} starts/s for partition a after 3 starts`);
  await page.screenshot({ path: join(shots, 'queues-drained.png'), fullPage: true });
  pass(`the queues page follows the queue live, to zero, with a recent rate (${rate} starts/s for partition a)`);
}

async function keyboard(page: Page): Promise<void> {
  await page.getByRole('link', { name: 'Runs', exact: true }).focus();
  await page.keyboard.press('Enter');
  await page.getByRole('heading', { name: 'Runs' }).waitFor();
  for (let i = 0; i < 40; i += 1) {
    await page.keyboard.press('Tab');
    const focused = await page.evaluate<string>("document.activeElement?.textContent ?? ''");
    if (focused === keys.first) break;
  }
  await page.keyboard.press('Enter');
  await page.getByRole('heading', { name: `Run ${keys.first}` }).waitFor();
  pass('the pages are reachable with the keyboard alone');
}

/** Ten tabs on six pages, the app stopped: how many statements reach the database in twenty seconds. */
async function measureTabs(context: BrowserContext, app: BrowserApp): Promise<void> {
  await app.stopWorker();
  await app.engine.shutdown();
  const paths = ['#/runs', '#/runs?status=failed', `#/run?scope=${scope}&key=${keys.first}`, '#/outbox', '#/workers', '#/queues'];
  const tabs: Page[] = [];
  for (let i = 0; i < 10; i += 1) {
    const tab = await context.newPage();
    await tab.goto(`${app.dashboardUrl}${paths[i % paths.length]}`);
    tabs.push(tab);
  }
  // Nothing but the dashboard (and, below, one connection that counts) is left on the database.
  await app.database.close();
  // The dashboard settles first: the writes of stopping the worker reach Postgres's counters
  // a moment later, and the open pages are read once more then.
  const stats = async () => (await (await fetch(`${app.dashboardUrl}api/stats`)).json()) as { probes: number; reads: number };
  for (let quiet = 0, last = -1, started = Date.now(); quiet < 3 && Date.now() - started < 30_000; ) {
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    const { reads } = await stats();
    quiet = reads === last ? quiet + 1 : 0;
    last = reads;
  }
  const meter = postgres(app.databaseUrl, { max: 1, onnotice: () => {} });
  const count = async () => {
    const [row] = await meter<{ n: string }[]>`
      select (xact_commit + xact_rollback)::text as n from pg_stat_database where datname = current_database()`;
    return Number(row!.n);
  };
  const own = await stats();
  const ownAt = performance.now();
  const before = await count();
  const seconds = 20;
  await new Promise((resolve) => setTimeout(resolve, seconds * 1_000));
  // Each backend reports its transactions to pg_stat_database about once a second, when idle.
  await new Promise((resolve) => setTimeout(resolve, 2_000));
  const after = await count();
  await meter.end();
  const statements = after - before - 1;
  const ownAfter = await stats();
  // The probes are counted between the two reads of the dashboard's own counters: the 20 s, the
  // wait for pg_stat_database and the reads themselves.
  const counted = (performance.now() - ownAt) / 1000;
  for (const tab of tabs) await tab.close();
  const probes = ownAfter.probes - own.probes;
  const reads = ownAfter.reads - own.reads;
  console.log(
    `  ..  10 tabs open on ${paths.length} pages for ${seconds} s, nothing running: the dashboard sent ${probes} probes and read ${reads} views ` +
      `(${((probes + reads) / seconds).toFixed(1)} statements/s); pg_stat_database counted ${statements} transactions, autovacuum's included`,
  );
  // One probe a second (a tick may come late on a busy machine, never early), and no read: nothing changed.
  if (probes > Math.ceil(counted) + 1 || reads > 0) throw new Error(`10 tabs cost ${probes} probes and ${reads} reads in ${counted.toFixed(1)} s`);
  pass('ten open tabs share one poll: about one statement a second');
}

const timer = setTimeout(() => {
  console.error(`browser test: gave up after ${deadline} ms`);
  process.exit(1);
}, deadline);
main().then(
  () => {
    clearTimeout(timer);
    process.exit(0);
  },
  (error: unknown) => {
    console.error(`\nbrowser test failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    console.log(`${checks.length} passed, 1 failed`);
    process.exit(1);
  },
);
