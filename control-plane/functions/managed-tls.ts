// The shell of rollcall-managed TLS (see managed-tls-core.ts): reads and writes the CA and
// serving Secrets with the API. Secret data never goes through Redis: the watcher projects
// Secrets' metadata only, so private keys exist only in the API server and in the job that
// reads them.
import type { V1Secret } from '@kubernetes/client-node';
import { policyServerSchema, type PolicyServer } from '../../api/v1alpha1.ts';
import {
  createCa,
  inspectCertificate,
  issueServingCertificate,
  verifyServingCertificate,
  type CertificateFacts,
} from '../../lib/certs/index.ts';
import { isConflict } from '../../lib/kube/errors.ts';
import {
  DEFAULT_CA_VALIDITY_MS,
  DEFAULT_SERVING_CERT_VALIDITY_MS,
  DEFAULT_TLS_PROPAGATION_DELAY_MS,
} from '../config.ts';
import { TerminalError } from '../queue/index.ts';
import {
  caCommonName,
  caSecret,
  planCaRotation,
  readCa,
  readServing,
  servingDnsNames,
  servingSecret,
  servingSecretName,
  usesManagedTls,
  webhooksOfServer,
  webhooksTrust,
  WEBHOOK_CA_SECRET,
  type CaReading,
  type ServingState,
} from './managed-tls-core.ts';
import type { FunctionContext } from './types.ts';

export type UsableCa = Extract<CaReading, { kind: 'usable' }>;

const propagationDelay = (ctx: FunctionContext) =>
  ctx.config.tlsPropagationDelayMs ?? DEFAULT_TLS_PROPAGATION_DELAY_MS;

/**
 * The webhook CA: created when absent, replaced when unusable (expired, broken), rotated
 * (publish, then drop the old CA) when due. Resolves with the CA as it now stands and when
 * to look at it again.
 */
export async function ensureWebhookCa(
  ctx: FunctionContext,
): Promise<{ ca: UsableCa; nextAt?: Date }> {
  const { namespace } = ctx.config;
  const existing = await ctx.kube.getSecret(namespace, WEBHOOK_CA_SECRET);
  const now = ctx.now();
  const reading = readCa(existing, now);
  const newCa = () =>
    createCa({
      commonName: caCommonName(namespace),
      validityMs: ctx.config.caValidityMs ?? DEFAULT_CA_VALIDITY_MS,
      now,
    });
  if (reading.kind === 'usable') {
    const servers =
      reading.trusted.length > 1 ? await servingStates(ctx, reading.ca.certPem) : undefined;
    const step = planCaRotation(reading, servers, now, propagationDelay(ctx));
    if (step.kind === 'wait') return { ca: reading, ...(step.at ? { nextAt: step.at } : {}) };
    // Conditional writes: a concurrent step makes this one conflict (409) and the job re-run.
    let next: V1Secret;
    if (step.kind === 'publish') {
      const fresh = await newCa();
      next = caSecret(
        fresh,
        namespace,
        existing,
        reading.trusted.map((t) => t.certPem),
      );
      ctx.log.info({ secret: WEBHOOK_CA_SECRET, why: step.why }, 'new webhook CA published');
    } else {
      next = caSecret(reading.ca, namespace, existing);
      ctx.log.info({ secret: WEBHOOK_CA_SECRET, why: step.why }, 'old webhook CA dropped');
    }
    await ctx.kube.replaceSecret(namespace, next);
    return { ca: usableOrThrow(readCa(next, now)) };
  }

  const ca = await newCa();
  if (reading.kind === 'absent') {
    try {
      await ctx.kube.createSecret(namespace, caSecret(ca, namespace));
      ctx.log.info({ secret: WEBHOOK_CA_SECRET }, 'webhook CA created');
    } catch (err) {
      if (!isConflict(err)) throw err;
      // Another job created it first: use theirs, so every server shares one CA.
      return {
        ca: usableOrThrow(readCa(await ctx.kube.getSecret(namespace, WEBHOOK_CA_SECRET), now)),
      };
    }
  } else {
    // Nothing verifies against an unusable CA, so replacing it cannot break a working webhook.
    ctx.log.warn({ secret: WEBHOOK_CA_SECRET, reason: reading.reason }, 'replacing the webhook CA');
    await ctx.kube.replaceSecret(namespace, caSecret(ca, namespace, existing));
  }
  return { ca: usableOrThrow(readCa(caSecret(ca, namespace), now)) };
}

function usableOrThrow(reading: CaReading): UsableCa {
  if (reading.kind === 'usable') return reading;
  throw new Error(
    `Secret ${WEBHOOK_CA_SECRET} ${reading.kind === 'absent' ? 'vanished' : `is unusable: ${reading.reason}`}; rollcall will try again`,
  );
}

/** Every managed server's certificate, read with the API (only while a rotation is on). */
async function servingStates(ctx: FunctionContext, signingPem: string): Promise<ServingState[]> {
  const { namespace } = ctx.config;
  const servers = (await ctx.store.all('policyserver')).flatMap((raw) => {
    const parsed = policyServerSchema.safeParse(raw);
    return parsed.success && usesManagedTls(parsed.data) ? [parsed.data] : [];
  });
  const now = ctx.now();
  return Promise.all(
    servers.map(async (server): Promise<ServingState> => {
      const secret = await ctx.kube.getSecret(namespace, servingSecretName(server.metadata.name));
      const certPem = secret?.data?.['tls.crt'];
      if (certPem === undefined) return { server: server.metadata.name, signedByCurrent: false };
      const pem = Buffer.from(certPem, 'base64').toString('utf8');
      const signedByCurrent = verifyServingCertificate({
        caPem: signingPem,
        certPem: pem,
        dnsNames: [],
        now,
      }).ok;
      return {
        server: server.metadata.name,
        signedByCurrent,
        issuedAt: inspectCertificate(pem).notBefore,
      };
    }),
  );
}

/**
 * Makes sure the PolicyServer's serving Secret holds a certificate its webhooks can verify,
 * issuing one when needed. Resolves with its facts and when to look again.
 */
export async function ensureServingSecret(
  ctx: FunctionContext,
  server: PolicyServer,
  ca: UsableCa,
): Promise<{ renewAt: Date; facts: CertificateFacts }> {
  const { namespace } = ctx.config;
  const name = servingSecretName(server.metadata.name);
  const existing = await ctx.kube.getSecret(namespace, name);
  const now = ctx.now();
  const caInfo = { ca: ca.ca, trusted: ca.trusted };
  let reading = readServing(existing, server, caInfo, namespace, now);
  if (reading.kind === 'usable' && !reading.signedByCurrent) {
    // Rotation step 2: only once every webhook of the server trusts the new CA.
    const webhooks = webhooksOfServer(await ctx.store.webhooks(), server.metadata.name, namespace);
    reading = readServing(existing, server, caInfo, namespace, now, {
      webhooksTrustCurrent: webhooksTrust(webhooks, ca.ca.certPem),
      propagationDelayMs: propagationDelay(ctx),
    });
  }
  if (reading.kind === 'usable') return { renewAt: reading.renewAt, facts: reading.facts };

  // The Secret's type cannot change in place; someone else's Secret of that name is theirs.
  // Retrying cannot fix it (terminal); once the operator deletes it, the next run issues it.
  if (existing !== undefined && existing.type !== 'kubernetes.io/tls')
    throw new TerminalError(
      `Secret ${namespace}/${name} has type ${existing.type ?? 'Opaque'}, not kubernetes.io/tls; delete it and rollcall issues the policy server's certificate into a new one`,
    );
  const issued = await issueServingCertificate({
    ca: ca.ca,
    dnsNames: servingDnsNames(server.metadata.name, namespace),
    validityMs: ctx.config.servingCertValidityMs ?? DEFAULT_SERVING_CERT_VALIDITY_MS,
    now,
  });
  const secret: V1Secret = servingSecret(server, namespace, issued, ca.ca.certPem, existing);
  // A 409 (created or changed meanwhile) makes the queue run the key again on fresh state.
  if (existing === undefined) await ctx.kube.createSecret(namespace, secret);
  else await ctx.kube.replaceSecret(namespace, secret);
  ctx.log.info({ secret: name, reason: reading.reason }, 'serving certificate issued');

  const after = readServing(secret, server, caInfo, namespace, now);
  if (after.kind !== 'usable')
    throw new Error(`the certificate just issued into ${name} is not usable: ${after.reason}`);
  return { renewAt: after.renewAt, facts: after.facts };
}
