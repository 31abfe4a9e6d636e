/** Hash routes: #/runs?status=failed, #/run?scope=s&key=k, #/key?key=k, #/outbox?status=failed, #/queues, #/workers. */
export type Page = 'runs' | 'run' | 'key' | 'outbox' | 'queues' | 'workers';

export interface Route {
  page: Page;
  params: URLSearchParams;
  title: string;
}

const titles: Record<Page, string> = { runs: 'Runs', run: 'Run', key: 'Key lookup', outbox: 'Outbox', queues: 'Queues', workers: 'Workers' };

export function parseRoute(hash: string): Route {
  const [path = '', query = ''] = hash.replace(/^#\/?/, '').split('?');
  const page = (Object.keys(titles) as Page[]).includes(path as Page) ? (path as Page) : 'runs';
  const params = new URLSearchParams(query);
  const title = page === 'run' ? `Run ${params.get('key') ?? ''}` : titles[page];
  return { page, params, title };
}

/** The href of a page with these parameters (empty ones left out). */
export function href(page: Page, params: Record<string, string | number | undefined | null> = {}): string {
  const query = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) if (value !== undefined && value !== null && value !== '') query.set(name, String(value));
  const text = query.toString();
  return `#/${page}${text ? `?${text}` : ''}`;
}
