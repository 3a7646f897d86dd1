// The CA bundle a PolicyServer's webhooks trust, as the webhook function needs it:
//  1. `--webhook-ca-file` (URL mode, out-of-cluster development) wins, as it always did;
//  2. the PolicyServer's spec.caBundle;
//  3. spec.caSecretRef: the referenced Secret's CA, once its certificate chains to it and names
//     the Service (policyserver-tls-core.ts); otherwise blocked, with the reason;
//  4. a server with an image of its own and no CA: no bundle (the API server's trust roots);
//  5. rollcall's image and no CA: the managed webhook CA's ca.crt, every CA it trusts during a
//     rotation (managed-tls-core.ts), blocked until the policyserver function has created it.
// Secrets are read with the API (never from Redis), at most once per Secret per job, and on
// every job that asks: a changed Secret brings the webhook jobs back through the watcher's
// Secret watch, and they read the new content.
import type { V1Secret } from '@kubernetes/client-node';
import type { PolicyServer } from '../../api/v1alpha1.ts';
import { readCa, WEBHOOK_CA_SECRET } from './managed-tls-core.ts';
import { readReferencedTls } from './policyserver-tls-core.ts';
import type { FunctionContext } from './types.ts';

/** Same shape as webhook-core's WebhookCa: a base64 PEM bundle, none, or why not yet. */
export type ResolvedWebhookCa = { caBundle?: string } | { blocked: string };

const reads = new WeakMap<FunctionContext, Map<string, Promise<V1Secret | undefined>>>();

/** A Secret of rollcall's namespace as this job sees it (one API read per job and name). */
function secretOf(ctx: FunctionContext, name: string): Promise<V1Secret | undefined> {
  let cache = reads.get(ctx);
  if (cache === undefined) reads.set(ctx, (cache = new Map()));
  let read = cache.get(name);
  if (read === undefined) {
    read = ctx.kube.getSecret(ctx.config.namespace, name);
    cache.set(name, read);
    // A failed read is not cached: the job fails and its retry reads again.
    read.catch(() => cache.delete(name));
  }
  return read;
}

const base64 = (pem: string) => Buffer.from(pem, 'utf8').toString('base64');

export async function webhookCaBundle(
  ctx: FunctionContext,
  server: PolicyServer,
): Promise<ResolvedWebhookCa> {
  if (ctx.config.webhookCaBundle !== undefined) return { caBundle: ctx.config.webhookCaBundle };
  const { spec } = server;
  const name = server.metadata.name;
  const { namespace } = ctx.config;
  if (spec.caBundle !== undefined) return { caBundle: spec.caBundle };
  if (spec.caSecretRef !== undefined) {
    const secret = await secretOf(ctx, spec.caSecretRef.name);
    const tls = readReferencedTls(secret, server, namespace, ctx.now());
    return tls.kind === 'ok' ? { caBundle: base64(tls.caPem) } : { blocked: tls.problem.message };
  }
  if (spec.image !== undefined) return {};

  const reading = readCa(await secretOf(ctx, WEBHOOK_CA_SECRET), ctx.now());
  switch (reading.kind) {
    case 'usable':
      return { caBundle: base64(reading.bundlePem) };
    case 'absent':
      return {
        blocked: `The webhook CA (Secret ${namespace}/${WEBHOOK_CA_SECRET}) does not exist yet; the policyserver function creates it for PolicyServer ${name}.`,
      };
    case 'unusable':
      return {
        blocked: `The webhook CA (Secret ${namespace}/${WEBHOOK_CA_SECRET}) is unusable (${reading.reason}); the policyserver function replaces it.`,
      };
  }
}
