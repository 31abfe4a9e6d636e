/**
 * Who may read and who may act.
 *
 *   no token configured   read-only: anyone who reaches the dashboard reads
 *                         (under a Host name it is served under:
 *                         host-check.ts), nobody acts (`stepkey dashboard`
 *                         then binds to a loopback address only)
 *   a token               acting needs it: signed in (a session cookie) or
 *                         sent as `Authorization: Bearer <token>`; reading
 *                         needs it too unless reads are public
 *   readOnly              nobody acts, whatever they send
 *
 * A session is a cookie (HttpOnly, SameSite=Strict) holding its expiry and
 * an HMAC of it under the token, so any process that knows the token checks
 * it and changing the token ends every session. An action sent with the
 * cookie also needs the CSRF token (an HMAC of the session) in a header, a
 * JSON body, and — when the browser says where it came from — the same
 * origin: a page elsewhere can neither read the CSRF token nor send such a
 * request without a CORS preflight, which the dashboard never grants.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { StepkeyError } from '../errors/stepkey-error.js';
import type { DashboardRequest } from './http.js';

export const SESSION_COOKIE = 'stepkey_dashboard';
export const CSRF_HEADER = 'x-stepkey-csrf';
const SESSION_MS = 12 * 60 * 60 * 1000;
const MIN_TOKEN_LENGTH = 16;

export interface AuthOptions {
  token: string | undefined;
  publicRead: boolean;
  readOnly: boolean;
  /** The cookie's path: the dashboard's base path. */
  cookiePath: string;
}

export interface Access {
  canRead: boolean;
  canAct: boolean;
  /** Signed in with a session cookie (actions then need the CSRF header). */
  session: string | undefined;
  /** Sent the token itself (Authorization: Bearer). */
  bearer: boolean;
}

export class DashboardAuth {
  readonly #options: AuthOptions;

  constructor(options: AuthOptions) {
    if (options.token !== undefined && options.token.length < MIN_TOKEN_LENGTH) {
      throw new StepkeyError('invalid_options', `The dashboard's access token must be at least ${MIN_TOKEN_LENGTH} characters long.`);
    }
    this.#options = options;
  }

  get tokenConfigured(): boolean {
    return this.#options.token !== undefined;
  }

  /** Whether anyone may read, without the token. */
  get publicRead(): boolean {
    return this.#options.token === undefined || this.#options.publicRead;
  }

  get readOnly(): boolean {
    return this.#options.readOnly || this.#options.token === undefined;
  }

  access(request: DashboardRequest): Access {
    const token = this.#options.token;
    if (token === undefined) return { canRead: true, canAct: false, session: undefined, bearer: false };
    const bearer = bearerToken(request) !== undefined && equal(bearerToken(request)!, token);
    const cookie = cookieValue(request, SESSION_COOKIE);
    const session = cookie !== undefined && this.#validSession(cookie) ? cookie : undefined;
    const known = bearer || session !== undefined;
    return { canRead: this.#options.publicRead || known, canAct: known && !this.#options.readOnly, session, bearer };
  }

  /** Checks a sign-in; returns the Set-Cookie header of a new session. */
  signIn(given: unknown, secure: boolean): string | undefined {
    const token = this.#options.token;
    if (token === undefined || typeof given !== 'string' || !equal(given, token)) return undefined;
    const expires = Date.now() + SESSION_MS;
    const value = `v1.${expires}.${this.#mac(`session:${expires}`)}`;
    return this.#cookie(value, Math.floor(SESSION_MS / 1000), secure);
  }

  signOut(secure: boolean): string {
    return this.#cookie('', 0, secure);
  }

  /** The CSRF token of a session (shown to the signed-in page, sent back with each action). */
  csrfFor(session: string): string {
    return this.#mac(`csrf:${session}`);
  }

  /** Why an action may not go ahead, or undefined when it may. */
  refuseAction(request: DashboardRequest, access: Access): { status: number; code: string; message: string } | undefined {
    if (this.readOnly) {
      return { status: 403, code: 'read_only', message: this.#options.token === undefined ? 'This dashboard has no access token: it is read-only.' : 'This dashboard is read-only.' };
    }
    if (!access.canAct) return { status: 401, code: 'sign_in', message: 'Actions need the access token: sign in first.' };
    if (!(request.headers['content-type'] ?? '').toLowerCase().startsWith('application/json')) {
      return { status: 415, code: 'json_only', message: 'Actions take a JSON body (Content-Type: application/json).' };
    }
    if (access.bearer) return undefined;
    if (!sameOrigin(request)) return { status: 403, code: 'cross_origin', message: 'Actions are accepted from the dashboard itself only.' };
    const sent = request.headers[CSRF_HEADER];
    if (!access.session || !sent || !equal(sent, this.csrfFor(access.session))) {
      return { status: 403, code: 'csrf', message: `The ${CSRF_HEADER} header is missing or wrong: reload the page.` };
    }
    return undefined;
  }

  #validSession(value: string): boolean {
    const match = /^v1\.(\d{1,16})\.([\w-]{43})$/.exec(value);
    if (!match) return false;
    const expires = Number(match[1]);
    return expires > Date.now() && equal(match[2]!, this.#mac(`session:${expires}`));
  }

  #mac(text: string): string {
    return createHmac('sha256', this.#options.token ?? '').update(text).digest('base64url');
  }

  #cookie(value: string, maxAge: number, secure: boolean): string {
    return `${SESSION_COOKIE}=${value}; Path=${this.#options.cookiePath}; Max-Age=${maxAge}; HttpOnly; SameSite=Strict${secure ? '; Secure' : ''}`;
  }
}

function equal(a: string, b: string): boolean {
  const left = Buffer.from(a);
  const right = Buffer.from(b);
  return left.length === right.length && timingSafeEqual(left, right);
}

function bearerToken(request: DashboardRequest): string | undefined {
  const match = /^Bearer\s+(\S+)\s*$/i.exec(request.headers.authorization ?? '');
  return match?.[1];
}

function cookieValue(request: DashboardRequest, name: string): string | undefined {
  for (const part of (request.headers.cookie ?? '').split(';')) {
    const [key, ...rest] = part.trim().split('=');
    if (key === name) return rest.join('=');
  }
  return undefined;
}

/** Same origin, as far as the browser tells: Sec-Fetch-Site, then Origin against Host. */
function sameOrigin(request: DashboardRequest): boolean {
  const site = request.headers['sec-fetch-site'];
  if (site !== undefined && site !== 'same-origin') return false;
  const origin = request.headers.origin;
  if (origin === undefined) return true;
  try {
    return new URL(origin).host === request.headers.host;
  } catch {
    return false;
  }
}
