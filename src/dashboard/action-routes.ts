/**
 * The POST side of the dashboard: signing in and out, and the operator's
 * actions — the same functions the CLI and the engine use (src/actions),
 * each recorded in the audit log with the dashboard's actor. Every action
 * needs the access token (a session plus the CSRF header, or the bearer
 * token), a JSON body, and is refused in read-only mode (auth.ts).
 */
import { z } from 'zod';
import type { ActionResult } from '../actions/cancel-run.js';
import { operatorActions, type OperatorActions } from '../actions/operator-actions.js';
import { notResumedBecause, type ResumeResult } from '../actions/resume-run.js';
import type { Database } from '../db/connect.js';
import type { Clock } from '../db/clock.js';
import type { ActionAnswer } from './api-types.js';
import type { Access, DashboardAuth } from './auth.js';
import { json, problem, type DashboardRequest, type DashboardResponse } from './http.js';

const ref = { scope: z.string().min(1).max(255), key: z.string().min(1).max(255) };
const bodies = {
  cancel: z.object({ ...ref, reason: z.string().trim().min(1).max(1000).optional() }).strict(),
  resume: z.object(ref).strict(),
  retry: z.object({ ids: z.array(z.string().regex(/^[1-9]\d{0,18}$/)).min(1).max(1000) }).strict(),
};

export interface ActionDeps {
  database: Pick<Database, 'sql'>;
  clock: Clock;
  retentionMs: number;
  auth: DashboardAuth;
  actor: (request: DashboardRequest) => string;
  /** Called after a change, so that every open page reads again. */
  changed: () => void;
}

export async function signIn(request: DashboardRequest, deps: ActionDeps): Promise<DashboardResponse> {
  const body = parseJson(request.body);
  const cookie = deps.auth.signIn((body as { token?: unknown } | undefined)?.token, request.secure);
  if (!cookie) {
    // A wrong token costs the guesser time.
    await new Promise((resolve) => setTimeout(resolve, 400));
    return problem(deps.auth.tokenConfigured ? 401 : 403, 'wrong_token', deps.auth.tokenConfigured ? 'That is not the access token.' : 'This dashboard has no access token: it is read-only.');
  }
  return json(200, { signedIn: true }, { 'set-cookie': cookie });
}

export function signOut(request: DashboardRequest, deps: ActionDeps, access: Access): DashboardResponse {
  if (access.session && !access.bearer) {
    const refused = deps.auth.refuseAction(request, access);
    if (refused && refused.code !== 'read_only') return problem(refused.status, refused.code, refused.message);
  }
  return json(200, { signedIn: false }, { 'set-cookie': deps.auth.signOut(request.secure) });
}

export async function runAction(name: string, request: DashboardRequest, deps: ActionDeps, access: Access): Promise<DashboardResponse> {
  if (!(name in bodies)) return problem(404, 'not_found', `There is no action '${name}'.`);
  const refused = deps.auth.refuseAction(request, access);
  if (refused) return problem(refused.status, refused.code, refused.message);
  const parsed = bodies[name as keyof typeof bodies].safeParse(parseJson(request.body));
  if (!parsed.success) return problem(400, 'invalid_input', `The ${name} action's body is invalid: ${parsed.error.issues.map((i) => `${i.path.join('.') || 'body'}: ${i.message}`).join('; ')}.`);
  const actions: OperatorActions = operatorActions(deps.database, {
    by: { actor: deps.actor(request), source: 'dashboard' },
    clock: deps.clock,
    retentionMs: deps.retentionMs,
  });
  let answer: ActionAnswer;
  if (name === 'retry') {
    const { ids } = parsed.data as z.infer<typeof bodies.retry>;
    const { retried, missed } = await actions.retryJobs(ids);
    answer = {
      applied: retried.length > 0,
      retried,
      missed,
      message: missed.length ? `Retried ${retried.length}; not retried (unknown, or running now): ${missed.join(', ')}.` : `Retried ${retried.join(', ')}.`,
    };
  } else {
    const body = parsed.data as z.infer<typeof bodies.cancel>;
    const target = { scope: body.scope, key: body.key };
    const result = name === 'cancel' ? await actions.cancel(target, body.reason) : await actions.resume(target);
    answer = { applied: result.applied, previous: result.previous, message: actionMessage(name, result) };
  }
  deps.changed();
  return json(answer.applied ? 200 : 409, answer);
}

function actionMessage(name: string, result: ActionResult | ResumeResult): string {
  const { applied, previous } = result;
  if (name === 'cancel') return applied ? `Cancelled (was ${previous}).` : `Not cancelled: the run has already ended (${previous}).`;
  if (applied) return `Due now (was ${previous}): a worker's sweeper continues it.`;
  return `Not resumed: ${notResumedBecause({ busy: false, expired: false, ...result })}.`;
}

function parseJson(body: string | undefined): unknown {
  if (!body) return undefined;
  try {
    return JSON.parse(body);
  } catch {
    return undefined;
  }
}
