/**
 * Which Host a dashboard answers for. A dashboard that anyone may read (no
 * token, or `publicRead`) is kept from other sites only by where it listens:
 * a loopback address, a private network. DNS rebinding gets round that — a
 * page on attacker.example, whose name the attacker then points at
 * 127.0.0.1, reads the dashboard as its own origin, and its requests say
 * `Host: attacker.example`. So, as Vite's dev server does, such a dashboard
 * answers only a Host (compared without its port, in any case; IPv6 in
 * brackets) that names it:
 *
 *   localhost, 127.0.0.1, [::1]   always
 *   allowedHosts                  the operator's names — '.example.com' is
 *                                 example.com and every name under it — and
 *                                 the addresses `stepkey dashboard` listens on
 *                                 (a mounted handler cannot know its own);
 *                                 `true` turns the check off, for a proxy
 *                                 that checks Host itself
 *
 * Any other Host, or none, is answered 403 before anything is read. A
 * dashboard whose reading needs the token answers any Host: the token
 * guards it, and a browser never sends the session cookie to another name.
 */
import { StepkeyError } from '../errors/stepkey-error.js';
import { problem, type DashboardRequest, type DashboardResponse } from './http.js';

export type AllowedHosts = readonly string[] | true;

const loopbackNames = ['localhost', '127.0.0.1', '[::1]'];
const hostName = /^[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*$/;
const ipv6 = /^\[[0-9a-f:.]+\]$/;

export class HostCheck {
  readonly #enabled: boolean;
  readonly #names: Set<string>;
  /** Domains whose subdomains are allowed, each with its leading dot. */
  readonly #domains: string[] = [];

  /** `enabled`: whether reading needs no token (only then does Host matter). */
  constructor(allowed: AllowedHosts | undefined, enabled: boolean) {
    if (allowed !== undefined && allowed !== true && !Array.isArray(allowed)) {
      throw new StepkeyError('invalid_options', `allowedHosts is a list of host names (or true), got ${typeof allowed}.`);
    }
    this.#enabled = enabled && allowed !== true;
    this.#names = new Set(loopbackNames);
    for (const entry of allowed === true ? [] : (allowed ?? [])) {
      const name = allowedHostName(entry);
      if (name.startsWith('.')) {
        this.#domains.push(name);
        this.#names.add(name.slice(1));
      } else this.#names.add(name);
    }
  }

  /** The 403 for a Host this dashboard does not answer for, or undefined. */
  refuse(request: DashboardRequest): DashboardResponse | undefined {
    if (!this.#enabled) return undefined;
    const header = request.headers.host;
    const name = header === undefined ? undefined : nameOfHost(header);
    if (name !== undefined && (this.#names.has(name) || this.#domains.some((domain) => name.endsWith(domain)))) return undefined;
    const shown = header === undefined ? 'no Host header' : `Host '${header.length > 100 ? `${header.slice(0, 100)}…` : header}'`;
    return problem(
      403,
      'host_not_allowed',
      `This dashboard does not answer a request with ${shown}: it answers for localhost, 127.0.0.1, [::1] and its allowedHosts ` +
        '(`stepkey dashboard --allowed-hosts`). Add the name it is served under there, or configure an access token that reading needs.',
    );
  }
}

/** The host name of a Host header, lower-cased and without its port (an IPv6 address in brackets); undefined when malformed. */
export function nameOfHost(header: string): string | undefined {
  const value = header.trim().toLowerCase();
  let name: string;
  let rest: string;
  if (value.startsWith('[')) {
    const end = value.indexOf(']');
    if (end === -1) return undefined;
    name = value.slice(0, end + 1);
    rest = value.slice(end + 1);
  } else {
    const colon = value.indexOf(':');
    name = colon === -1 ? value : value.slice(0, colon);
    rest = colon === -1 ? '' : value.slice(colon);
  }
  if (rest !== '' && !/^:\d{1,5}$/.test(rest)) return undefined;
  return hostName.test(name) || ipv6.test(name) ? name : undefined;
}

/** An allowedHosts entry as it is compared: lower-cased, an IPv6 address in brackets; `what` names the option in errors. */
export function allowedHostName(entry: unknown, what = 'allowedHosts'): string {
  const given = typeof entry === 'string' ? entry.trim().toLowerCase() : '';
  const name = given.includes(':') && !given.startsWith('[') ? `[${given}]` : given;
  const bare = name.startsWith('.') ? name.slice(1) : name;
  if (!hostName.test(bare) && !(ipv6.test(name))) {
    throw new StepkeyError(
      'invalid_options',
      `${what}: ${JSON.stringify(entry)} is not a host name (such as 'ops.example.com', '.example.com' for it and its subdomains, or an IP address).`,
    );
  }
  return name;
}
