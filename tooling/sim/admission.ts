// The simulated policy servers' admission endpoint (dev tooling for the local cluster).
// kwok pods have no network, so one HTTPS server in the `rollcall sim` process answers for
// every policy on loopback, and rollcall registers webhooks by URL
// (`rollcall run --webhook-url https://127.0.0.1:PORT --webhook-ca-file CA`).
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import type { ValidationAction } from '../../api/v1alpha1.ts';
import { parseWebhookPath } from '../../api/webhook-path.ts';
import { admissionResponse, type AdmissionResponse } from '../../data-plane/verdict.ts';
import { behaviourOf } from './behaviour.ts';

/** The part of a Policy the verdict depends on. */
export interface AdmissionPolicy {
  module: string;
  /** actionsOf the Policy's spec (default [Deny]). */
  actions?: readonly ValidationAction[];
}

/** The parts of an AdmissionReview v1 request the simulator reads. */
interface AdmissionReviewRequest {
  apiVersion?: string;
  kind?: string;
  request?: {
    uid?: string;
    kind?: { kind?: string };
    namespace?: string;
    name?: string;
    operation?: string;
  };
}

/**
 * The verdict of one policy on one request, as a pure function: sim://deny fails validation,
 * and the policy's validationActions say what that does, as a real server's answer (Deny
 * denies, Warn warns, Audit annotates); every other module allows.
 */
export function verdict(
  uid: string,
  policyName: string,
  policy: AdmissionPolicy,
  generation = 1,
): AdmissionResponse {
  const behaviour = behaviourOf(policy.module);
  if (behaviour.kind !== 'deny') return { uid, allowed: true };
  const ctx = {
    policy: policyName,
    generation,
    actions: policy.actions ?? ['Deny'],
    failurePolicy: 'Fail' as const,
  };
  return admissionResponse(uid, ctx, {
    kind: 'verdict',
    verdict: { allowed: false, message: behaviour.message },
  }).response;
}

export interface AdmissionServerOptions {
  port: number;
  host?: string;
  certFile: string;
  keyFile: string;
  /** The policy named in the path, as the simulator's reflector currently sees it. */
  policy(name: string): AdmissionPolicy | undefined;
  logger: Logger;
}

const MAX_BODY = 3 * 1024 * 1024; // the apiserver's own request limit is about this size

/** Starts the HTTPS server and resolves once it listens. */
export async function startAdmissionServer(options: AdmissionServerOptions): Promise<Server> {
  const server = createServer(
    { cert: readFileSync(options.certFile), key: readFileSync(options.keyFile) },
    (req, res) => {
      handle(req, res, options).catch((err: unknown) => {
        options.logger.warn({ err }, 'admission request failed');
        if (!res.headersSent) reply(res, 500, { error: String(err) });
      });
    },
  );
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host ?? '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  return server;
}

async function handle(
  req: IncomingMessage,
  res: ServerResponse,
  options: AdmissionServerOptions,
): Promise<void> {
  const url = new URL(req.url ?? '/', 'https://sim');
  if (req.method === 'GET' && url.pathname === '/healthz') return reply(res, 200, { ok: true });
  // The webhook pins a generation; the simulator answers with the policy as its watch sees it.
  const target = parseWebhookPath(url.pathname);
  if (req.method !== 'POST' || !target)
    return reply(res, 404, { error: 'expected POST /validate/<policy>/<generation>' });
  const name = target.policy;

  let body = '';
  for await (const chunk of req) {
    body += String(chunk);
    if (body.length > MAX_BODY) return reply(res, 413, { error: 'request too large' });
  }
  let review: AdmissionReviewRequest;
  try {
    review = JSON.parse(body) as AdmissionReviewRequest;
  } catch {
    return reply(res, 400, { error: 'body is not JSON' });
  }
  const uid = review.request?.uid;
  if (review.kind !== 'AdmissionReview' || typeof uid !== 'string')
    return reply(res, 400, { error: 'expected an AdmissionReview v1 with request.uid' });

  // A webhook for a policy the simulator does not know would be a bug upstream: answer with
  // an error so the apiserver applies the webhook's failurePolicy, as with a real server.
  const policy = options.policy(name);
  if (!policy) return reply(res, 404, { error: `no policy ${name}` });

  const response = verdict(uid, name, policy, target.generation);
  const r = review.request!;
  options.logger.info(
    {
      policy: name,
      allowed: response.allowed,
      operation: r.operation,
      kind: r.kind?.kind,
      namespace: r.namespace,
      name: r.name,
    },
    'admission review',
  );
  reply(res, 200, { apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', response });
}

function reply(res: ServerResponse, code: number, body: unknown): void {
  res.writeHead(code, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}
