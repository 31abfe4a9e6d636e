/** Talking to the dashboard's server: views (with their version), the session, actions. */
import type { ActionAnswer, LiveEnvelope, SessionView } from '../api-types.js';

export class ApiError extends Error {
  readonly status: number;
  readonly code: string;
  constructor(status: number, code: string, message: string) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function answer<T>(response: Response): Promise<T> {
  const body = (await response.json().catch(() => undefined)) as { error?: { code: string; message: string } } | undefined;
  if (!response.ok || body?.error) {
    throw new ApiError(response.status, body?.error?.code ?? 'http', body?.error?.message ?? `The dashboard answered ${response.status}.`);
  }
  return body as T;
}

export async function loadSession(): Promise<SessionView> {
  return answer<SessionView>(await fetch('api/session', { cache: 'no-store', credentials: 'same-origin' }));
}

/** A view; with `since` its version, the answer may be `unchanged`. */
export async function loadView<T>(view: string, params: URLSearchParams, since?: string): Promise<LiveEnvelope<T>> {
  const query = new URLSearchParams(params);
  if (since) query.set('since', since);
  return answer<LiveEnvelope<T>>(await fetch(`api/${view}?${query.toString()}`, { cache: 'no-store', credentials: 'same-origin' }));
}

export async function signIn(token: string): Promise<void> {
  await answer(await post('api/session', { token }));
}

export async function signOut(csrf: string | null): Promise<void> {
  await answer(await post('api/session/end', {}, csrf));
}

/** An action; a refusal the server explains (409: already ended) comes back as an answer, not an error. */
export async function act(name: 'cancel' | 'resume' | 'retry', body: object, csrf: string | null): Promise<ActionAnswer> {
  const response = await post(`api/actions/${name}`, body, csrf);
  if (response.status === 409) return (await response.json()) as ActionAnswer;
  return answer<ActionAnswer>(response);
}

function post(url: string, body: object, csrf?: string | null): Promise<Response> {
  return fetch(url, {
    method: 'POST',
    credentials: 'same-origin',
    cache: 'no-store',
    headers: { 'content-type': 'application/json', ...(csrf ? { 'x-stepkey-csrf': csrf } : {}) },
    body: JSON.stringify(body),
  });
}
