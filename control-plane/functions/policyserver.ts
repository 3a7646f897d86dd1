// The policyserver function: keeps the server's Deployment and Service applied and writes
// the PolicyServer's status from the Deployment's kstatus. Event driven: the Deployment
// controller sets ProgressDeadlineExceeded, whose watch event brings us back; no polling.
// TLS first: a server that runs rollcall's image without a CA of its own gets its serving
// certificate from rollcall (managed-tls.ts), with a delayed re-run at its renewal time or the
// CA rotation's next step; a server with spec.caSecretRef has that Secret checked (Stalled
// when its webhooks could not trust it) and a re-run when its certificate nears expiry.
// Before anything, policyserver-guard.ts decides whether the spec may run at all: a refused
// one is Stalled (ForbiddenReference) and nothing is applied or read for it.
import { createHash } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import { API_VERSION, APPLIED_HASH_ANNOTATION, POLICY_SERVER_LABEL } from '../../api/constants.ts';
import type { Deployment } from '../../api/kube.ts';
import type { PolicyServer } from '../../api/v1alpha1.ts';
import { done, requeueAfter, terminal, type Outcome } from '../queue/index.ts';
import { ensureServingSecret, ensureWebhookCa } from './managed-tls.ts';
import { renewalDelayMs, usesManagedTls } from './managed-tls-core.ts';
import { notSyncedDelayMs, ownName, serversOfSecret } from './policy-keys.ts';
import { refusalCondition, refusePolicyServer, type Refusal } from './policyserver-guard.ts';
import {
  computePolicyServerStatus,
  planPolicyServer,
  policyServerResourceName,
  servingSecretName,
  type TlsState,
} from './policyserver-core.ts';
import {
  certificateStatus,
  expiryWarning,
  externalRecheckAt,
  readReferencedTls,
} from './policyserver-tls-core.ts';
import type { FunctionContext, ReconcileFunction } from './types.ts';

/** On the Deployment: a hash of the manifests rollcall last applied, to skip no-op applies. */
export { APPLIED_HASH_ANNOTATION };

const SERVICE_PREFIX = policyServerResourceName('');

export const policyServer: ReconcileFunction = {
  name: 'policyserver',

  watches: [
    { kind: 'PolicyServer', names: ownName },
    {
      kind: 'Deployment',
      names: (event) => [event.object.metadata?.labels?.[POLICY_SERVER_LABEL]],
    },
    // The CA, a serving certificate or a caSecretRef Secret changed (or vanished).
    { kind: 'Secret', names: serversOfSecret },
    // A CA rotation waits for the server's webhooks to trust the new CA.
    { kind: 'ValidatingWebhookConfiguration', names: (event) => webhookServers(event.object) },
  ],

  async handle(name, ctx) {
    const view = await ctx.store.policyServerView(name, policyServerResourceName(name));
    if (!view) return requeueAfter(notSyncedDelayMs);
    if (view.invalid) return terminal(`PolicyServer ${name} could not be read: ${view.invalid}`);
    const server = view.policyServer;
    if (!server) return done(); // deleted: owner references remove its Deployment, Service, Secret
    const refusal = refusePolicyServer(server, ctx.config.policyServerGuard);
    if (refusal !== undefined) return refuse(ctx, server, view.deployment, refusal);

    // The certificate before the Deployment, so the pods find the Secret they mount.
    const { tls, recheckAt } = await serverTls(ctx, server);

    const options = serverOptions(ctx);
    const plan = planPolicyServer(server, view.deployment, options, ctx.now(), tls);
    // Apply only when what rollcall wants changed: the Deployment carries a hash of it.
    const hash = createHash('sha256')
      .update(JSON.stringify([plan.deployment, plan.service]))
      .digest('hex')
      .slice(0, 16);
    if (view.deployment?.metadata?.annotations?.[APPLIED_HASH_ANNOTATION] !== hash) {
      const deployment = {
        ...plan.deployment,
        metadata: {
          ...plan.deployment.metadata,
          annotations: {
            ...plan.deployment.metadata?.annotations,
            [APPLIED_HASH_ANNOTATION]: hash,
          },
        },
      };
      await ctx.kube.apply(plan.service);
      await ctx.kube.apply(deployment);
    }
    const warning = expiryWarning(server.status?.certificate, plan.status.certificate, ctx.now());
    if (warning !== undefined) {
      // Before the status that records it: a failed status write means a second Event, not none.
      await ctx.kube.event(
        { apiVersion: API_VERSION, kind: 'PolicyServer', name, uid: server.metadata.uid },
        {
          type: 'Warning',
          reason: 'CertificateExpiring',
          action: 'CheckCertificate',
          note: warning,
        },
        ctx.now(),
      );
      ctx.log.warn({ note: warning }, 'serving certificate expires soon');
    }
    if (!isDeepStrictEqual(plan.status, server.status)) {
      if (await ctx.kube.patchStatus('policyservers', name, plan.status, server))
        ctx.log.info(
          { summary: plan.status.summary, ready: plan.status.ready },
          'policy server status written',
        );
    }
    // A key waits at most once: every run must ask for its TLS re-run again.
    return recheckAt === undefined ? done() : requeueAfter(renewalDelayMs(recheckAt, ctx.now()));
  },
};

const serverOptions = (ctx: FunctionContext) => ({
  namespace: ctx.config.namespace,
  policyServerImage: ctx.config.policyServerImage,
});

/**
 * A spec that names what a PolicyServer may not: Stalled with what to fix, and nothing applied
 * (nor its Secrets read). Not an error of rollcall's: the next change of the server runs it again.
 */
async function refuse(
  ctx: FunctionContext,
  server: PolicyServer,
  deployment: Deployment | undefined,
  refusal: Refusal,
): Promise<Outcome> {
  const problem = refusalCondition(server, refusal, deployment !== undefined);
  const status = computePolicyServerStatus(server, deployment, ctx.now(), serverOptions(ctx), {
    problem,
  });
  if (!isDeepStrictEqual(status, server.status)) {
    if (await ctx.kube.patchStatus('policyservers', server.metadata.name, status, server))
      ctx.log.warn({ reason: problem.reason, message: problem.message }, 'policy server refused');
  }
  return done();
}

/** The server's TLS for its status, and when it needs a look again (renewal, rotation, expiry). */
async function serverTls(
  ctx: FunctionContext,
  server: PolicyServer,
): Promise<{ tls: TlsState; recheckAt?: Date }> {
  const name = server.metadata.name;
  if (usesManagedTls(server)) {
    const { ca, nextAt } = await ensureWebhookCa(ctx);
    const serving = await ensureServingSecret(ctx, server, ca);
    const recheckAt = nextAt !== undefined && nextAt < serving.renewAt ? nextAt : serving.renewAt;
    const certificate = certificateStatus(
      serving.facts,
      servingSecretName(name),
      'rollcall',
      ctx.now(),
    );
    return { tls: { certificate }, recheckAt };
  }
  const ref = server.spec.caSecretRef;
  if (ref === undefined) return { tls: {} };
  const now = ctx.now();
  const secret = await ctx.kube.getSecret(ctx.config.namespace, ref.name);
  const read = readReferencedTls(secret, server, ctx.config.namespace, now);
  if (read.kind === 'problem') {
    ctx.log.warn({ secret: ref.name, reason: read.problem.message }, 'caSecretRef unusable');
    return { tls: { problem: read.problem } };
  }
  if (read.certificate === undefined) return { tls: {} };
  return {
    tls: { certificate: certificateStatus(read.certificate, ref.name, 'external', now) },
    recheckAt: externalRecheckAt(read.certificate.notAfter, now),
  };
}

/** The PolicyServers whose Service a webhook configuration calls. */
function webhookServers(object: unknown): string[] {
  const entries = (object as { webhooks?: unknown }).webhooks;
  if (!Array.isArray(entries)) return [];
  return entries.flatMap((e: { clientConfig?: { service?: { name?: unknown } } }) => {
    const service = e.clientConfig?.service?.name;
    return typeof service === 'string' && service.startsWith(SERVICE_PREFIX)
      ? [service.slice(SERVICE_PREFIX.length)]
      : [];
  });
}
