/**
 * The pure core of rollcall-managed TLS: which PolicyServers get it, the names and shapes of
 * its two kinds of Secret, whether what is in a Secret can still be used, and the steps of a
 * CA rotation.
 *
 * - The webhook CA: Secret `rollcall-webhook-ca` (Opaque) in rollcall's namespace, one per
 *   installation, created by the first policyserver job that needs it. `ca.crt` is the bundle
 *   of CAs the webhooks trust (PEM blocks, the signing CA first), `ca.key` the signing CA's
 *   key. Everything about a rotation in progress is in that Secret, so a restarted worker
 *   carries on where the last one stopped.
 * - A serving certificate per PolicyServer: Secret `policy-server-<name>-tls`
 *   (kubernetes.io/tls: `tls.crt`, `tls.key`, and `ca.crt` = the CA that signed it), owned by
 *   the PolicyServer, mounted into its pods, naming its Service under every name a client may
 *   use.
 *
 * Renewal: a serving certificate is issued again once two thirds of its life have passed; it
 * never outlives its CA, and one that already lasts as long as the CA is not re-issued for
 * age (that could not extend it: the CA's own rotation replaces it).
 *
 * CA rotation without a gap, started two thirds into the signing CA's life:
 *  1. publish: a new CA signs from now on and is trusted next to the old ones
 *     (`ca.crt` = new + old); the webhook function puts that bundle on every webhook.
 *  2. switch: a server's certificate (still signed by the old CA) is issued again by the new
 *     CA once every webhook of the server trusts the new CA, and the propagation delay has
 *     passed since the new CA appeared (the API server reads webhooks through its own watch).
 *  3. drop: once every managed server's certificate is signed by the new CA, and the
 *     propagation delay has passed since the last one was issued (kubelets update mounted
 *     Secrets with a delay; the policy server reloads on file change), `ca.crt` is the new CA
 *     alone, and the webhooks follow.
 * A CA that is unusable or expired is replaced at once (nothing verifies against it anyway).
 */
import type { V1Secret } from '@kubernetes/client-node';
import { MANAGED_BY, MANAGED_BY_LABEL, POLICY_SERVER_LABEL } from '../../api/constants.ts';
import type { ExistingWebhook } from '../../api/kube.ts';
import type { PolicyServer } from '../../api/v1alpha1.ts';
import {
  inspectCertificate,
  keyMatchesCertificate,
  renewalTime,
  splitPemCertificates,
  verifyServingCertificate,
  type CertificateAndKey,
  type CertificateAuthority,
  type CertificateFacts,
} from '../../lib/certs/index.ts';
import { ownedMetadata, policyServerResourceName, servingSecretName } from './policyserver-core.ts';

export { servingSecretName };

export const WEBHOOK_CA_SECRET = 'rollcall-webhook-ca';
const DAY_MS = 24 * 3_600_000;
/** A delayed re-run longer than this is cut short (timers overflow at 2^31 ms). */
export const MAX_RENEWAL_DELAY_MS = 7 * DAY_MS;

const TLS_SECRET_TYPE = 'kubernetes.io/tls';

/** rollcall issues the certificate when the PolicyServer runs rollcall's image and brings no CA. */
export function usesManagedTls(server: PolicyServer): boolean {
  const { spec } = server;
  return spec.image === undefined && spec.caBundle === undefined && spec.caSecretRef === undefined;
}

/** Every name a client may use for the server's Service; the first is what the API server uses. */
export function servingDnsNames(serverName: string, namespace: string): string[] {
  const service = policyServerResourceName(serverName);
  return [
    `${service}.${namespace}.svc`,
    `${service}.${namespace}.svc.cluster.local`,
    `${service}.${namespace}`,
    service,
  ];
}

export function caCommonName(namespace: string): string {
  return `rollcall-webhook-ca.${namespace}`;
}

const b64 = (text: string) => Buffer.from(text, 'utf8').toString('base64');
export const secretText = (
  data: Record<string, string> | undefined,
  key: string,
): string | undefined => {
  const value = data?.[key];
  return value === undefined ? undefined : Buffer.from(value, 'base64').toString('utf8');
};

/** PEM blocks compared by content, whatever the line endings or trailing newlines. */
const samePem = (a: string, b: string) => a.replace(/\s+/g, '') === b.replace(/\s+/g, '');

/** The resourceVersion of the Secret a write replaces: it makes the write conditional. */
const versionOf = (replacing: V1Secret | undefined) =>
  replacing?.metadata?.resourceVersion === undefined
    ? {}
    : { resourceVersion: replacing.metadata.resourceVersion };

/** The PEM bundle of `certs`, one block per line group, ending with a newline. */
export function pemBundle(certs: readonly string[]): string {
  return certs.map((c) => `${c.trim()}\n`).join('');
}

/**
 * The CA Secret: `ca` signs; `alsoTrusted` (PEM blocks) stay in ca.crt after it. Given the
 * Secret it replaces, its resourceVersion makes the write conditional.
 */
export function caSecret(
  ca: CertificateAuthority,
  namespace: string,
  replacing?: V1Secret,
  alsoTrusted: readonly string[] = [],
): V1Secret {
  return {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: {
      name: WEBHOOK_CA_SECRET,
      namespace,
      labels: { [MANAGED_BY_LABEL]: MANAGED_BY },
      ...versionOf(replacing),
    },
    type: 'Opaque',
    data: {
      'ca.crt': b64(pemBundle([ca.certPem, ...alsoTrusted.filter((c) => !samePem(c, ca.certPem))])),
      'ca.key': b64(ca.keyPem),
    },
  };
}

export interface TrustedCa {
  certPem: string;
  facts: CertificateFacts;
}

/** The CA rollcall signs with: its certificate, key and facts. */
export interface SigningCa extends TrustedCa {
  keyPem: string;
}

export type CaReading =
  | { kind: 'absent' }
  | { kind: 'unusable'; reason: string }
  | {
      kind: 'usable';
      ca: SigningCa;
      /** Every CA of ca.crt, the signing CA first: what the webhooks must trust. */
      trusted: TrustedCa[];
      /** ca.crt as a PEM bundle (the signing CA first). */
      bundlePem: string;
    };

/** Whether the CA Secret holds a CA rollcall can sign with now, and which CAs it trusts. */
export function readCa(secret: V1Secret | undefined, now: Date): CaReading {
  if (secret === undefined) return { kind: 'absent' };
  const bundle = secretText(secret.data, 'ca.crt');
  const keyPem = secretText(secret.data, 'ca.key');
  if (bundle === undefined || keyPem === undefined)
    return { kind: 'unusable', reason: 'it lacks ca.crt or ca.key' };
  const blocks = splitPemCertificates(bundle);
  if (blocks.length === 0)
    return { kind: 'unusable', reason: 'ca.crt is unreadable (no PEM certificate found)' };
  const trusted: TrustedCa[] = [];
  for (const certPem of blocks) {
    let facts: CertificateFacts;
    try {
      facts = inspectCertificate(certPem);
    } catch (err) {
      return { kind: 'unusable', reason: `ca.crt is unreadable (${(err as Error).message})` };
    }
    if (!facts.isCa) return { kind: 'unusable', reason: 'ca.crt is not a CA certificate' };
    trusted.push({ certPem, facts });
  }
  const signing = trusted.find((t) => keyMatchesCertificate(t.certPem, keyPem));
  if (signing === undefined)
    return { kind: 'unusable', reason: 'ca.key does not belong to ca.crt' };
  if (now >= signing.facts.notAfter)
    return {
      kind: 'unusable',
      reason: `the CA expired at ${signing.facts.notAfter.toISOString()}`,
    };
  const ordered = [signing, ...trusted.filter((t) => t !== signing)];
  return {
    kind: 'usable',
    ca: { ...signing, keyPem },
    trusted: ordered,
    bundlePem: pemBundle(ordered.map((t) => t.certPem)),
  };
}

/** Where one managed server's certificate stands, for the last step of a CA rotation. */
export interface ServingState {
  server: string;
  /** Signed by the signing CA (false: by an older one, or no certificate yet). */
  signedByCurrent: boolean;
  issuedAt?: Date;
}

export type CaStep =
  /** Nothing to do now; look again at `at` (undefined: when an event says so). */
  | { kind: 'wait'; at?: Date; why: string }
  /** Create a new CA that signs from now on, trusted next to the current ones. */
  | { kind: 'publish'; why: string }
  /** Trust only the signing CA. */
  | { kind: 'drop'; why: string };

/**
 * The next step of the CA's life. `servers` (every managed server's certificate) is needed
 * only while a rotation is in progress (more than one trusted CA).
 */
export function planCaRotation(
  reading: Extract<CaReading, { kind: 'usable' }>,
  servers: readonly ServingState[] | undefined,
  now: Date,
  propagationDelayMs: number,
): CaStep {
  const signing = reading.ca.facts;
  if (reading.trusted.length === 1) {
    const due = renewalTime(signing);
    return now >= due
      ? {
          kind: 'publish',
          why: `two thirds of the CA's life have passed (it expires at ${signing.notAfter.toISOString()})`,
        }
      : { kind: 'wait', at: due, why: 'the CA is not due for rotation' };
  }
  if (servers === undefined) return { kind: 'wait', why: 'servers not read' };
  const behind = servers.filter((s) => !s.signedByCurrent).map((s) => s.server);
  if (behind.length > 0)
    return {
      kind: 'wait',
      why: `waiting for the certificates of ${behind.join(', ')} to be signed by the new CA`,
    };
  const times = [signing.notBefore, ...servers.flatMap((s) => (s.issuedAt ? [s.issuedAt] : []))];
  const at = new Date(Math.max(...times.map((t) => t.getTime())) + propagationDelayMs);
  return now >= at
    ? {
        kind: 'drop',
        why: 'every serving certificate is signed by the new CA and has had time to reach its pods',
      }
    : { kind: 'wait', at, why: 'giving the policy servers time to load their new certificates' };
}

/** The serving Secret of a PolicyServer: the certificate, its key and the CA that signed it. */
export function servingSecret(
  server: PolicyServer,
  namespace: string,
  issued: CertificateAndKey,
  caPem: string,
  replacing?: V1Secret,
): V1Secret {
  const name = server.metadata.name;
  return {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: {
      ...ownedMetadata(server, servingSecretName(name), namespace, {
        [MANAGED_BY_LABEL]: MANAGED_BY,
        [POLICY_SERVER_LABEL]: name,
      }),
      ...versionOf(replacing),
    },
    type: TLS_SECRET_TYPE,
    data: {
      'tls.crt': b64(issued.certPem),
      'tls.key': b64(issued.keyPem),
      // The same text as the CA's block in the CA Secret's ca.crt (one PEM, newline-ended).
      'ca.crt': b64(pemBundle([caPem])),
    },
  };
}

/** What the serving core needs of the CA: the signing CA and every trusted one. */
export interface CaForServing {
  ca: TrustedCa;
  trusted: readonly TrustedCa[];
}

/** Whether a server may switch to a certificate of the signing CA (rotation step 2). */
export interface SwitchGate {
  /** Every webhook of the server trusts the signing CA. */
  webhooksTrustCurrent: boolean;
  propagationDelayMs: number;
}

export type ServingReading =
  /** Keep it; look again at `renewAt`. */
  | { kind: 'usable'; facts: CertificateFacts; renewAt: Date; signedByCurrent: boolean }
  /** Issue a new certificate into the Secret (create it when `secret` is undefined). */
  | { kind: 'reissue'; reason: string };

/** Whether a PolicyServer's serving Secret can stay as it is, and until when. */
export function readServing(
  secret: V1Secret | undefined,
  server: PolicyServer,
  caInfo: CaForServing,
  namespace: string,
  now: Date,
  /** Default: no switch (a caller that has not looked at the webhooks must not switch). */
  gate: SwitchGate = { webhooksTrustCurrent: false, propagationDelayMs: 0 },
): ServingReading {
  if (secret === undefined) return { kind: 'reissue', reason: 'the Secret does not exist' };
  const owner = secret.metadata?.ownerReferences?.find((r) => r.kind === 'PolicyServer');
  if (owner?.uid !== (server.metadata.uid ?? ''))
    return { kind: 'reissue', reason: 'the Secret is not owned by this PolicyServer' };
  const certPem = secretText(secret.data, 'tls.crt') ?? '';
  const keyPem = secretText(secret.data, 'tls.key') ?? '';
  const dnsNames = servingDnsNames(server.metadata.name, namespace);
  const ca = caInfo.ca;
  const verdict = verifyServingCertificate({
    caPem: pemBundle(caInfo.trusted.map((t) => t.certPem)),
    certPem,
    keyPem,
    dnsNames,
    now,
  });
  if (!verdict.ok) return { kind: 'reissue', reason: verdict.reason };
  const facts = inspectCertificate(certPem);
  const byCurrent = verifyServingCertificate({ caPem: ca.certPem, certPem, dnsNames, now }).ok;

  if (!byCurrent) {
    // Signed by an older CA the webhooks still trust: switch once they trust the new one too.
    const switchAt = new Date(ca.facts.notBefore.getTime() + gate.propagationDelayMs);
    if (gate.webhooksTrustCurrent && now >= switchAt)
      return { kind: 'reissue', reason: 'the CA is being rotated: switching to the new CA' };
    // Webhook events bring the job back; the re-run is a safety net.
    const retry = new Date(now.getTime() + Math.max(gate.propagationDelayMs, 5000));
    return {
      kind: 'usable',
      facts,
      renewAt: gate.webhooksTrustCurrent ? switchAt : retry,
      signedByCurrent: false,
    };
  }
  if (secretText(secret.data, 'ca.crt')?.trim() !== ca.certPem.trim())
    return { kind: 'reissue', reason: 'its ca.crt is not the CA that signs' };
  const renewAt = nextRenewal(facts, ca.facts);
  if (now >= renewAt && facts.notAfter < ca.facts.notAfter)
    return {
      kind: 'reissue',
      reason: `two thirds of its life have passed (it expires at ${facts.notAfter.toISOString()})`,
    };
  return { kind: 'usable', facts, renewAt, signedByCurrent: true };
}

/**
 * When to look at a serving certificate again: two thirds into its life, or when its CA
 * expires if that comes first or if the certificate already lasts as long as the CA.
 */
export function nextRenewal(serving: CertificateFacts, ca: CertificateFacts): Date {
  if (serving.notAfter >= ca.notAfter) return ca.notAfter;
  const due = renewalTime(serving);
  return due < ca.notAfter ? due : ca.notAfter;
}

/** The queue delay until `at`: at least a second, at most MAX_RENEWAL_DELAY_MS. */
export function renewalDelayMs(at: Date, now: Date): number {
  return Math.min(MAX_RENEWAL_DELAY_MS, Math.max(1000, at.getTime() - now.getTime()));
}

/** True when the base64 PEM bundle holds `certPem`. */
export function bundleTrusts(caBundle: string | undefined, certPem: string): boolean {
  if (caBundle === undefined) return false;
  const pem = Buffer.from(caBundle, 'base64').toString('utf8');
  return splitPemCertificates(pem).some((c) => samePem(c, certPem));
}

interface WebhookEntry {
  clientConfig?: { caBundle?: string; service?: { name?: string; namespace?: string } };
}

/** rollcall's webhooks that call the server's Service. */
export function webhooksOfServer(
  webhooks: readonly ExistingWebhook[],
  serverName: string,
  namespace: string,
): ExistingWebhook[] {
  const service = policyServerResourceName(serverName);
  return webhooks.filter(
    (w) =>
      w.metadata?.labels?.[MANAGED_BY_LABEL] === MANAGED_BY &&
      ((w.webhooks ?? []) as WebhookEntry[]).some(
        (e) =>
          e.clientConfig?.service?.name === service &&
          e.clientConfig.service.namespace === namespace,
      ),
  );
}

/** Every entry of every given webhook trusts `certPem` (vacuously true without webhooks). */
export function webhooksTrust(webhooks: readonly ExistingWebhook[], certPem: string): boolean {
  return webhooks.every((w) =>
    ((w.webhooks ?? []) as WebhookEntry[]).every((e) =>
      bundleTrusts(e.clientConfig?.caBundle, certPem),
    ),
  );
}

/** A PolicyServer as the watcher holds it: only the fields that say which Secrets it reads. */
interface ServerLike {
  metadata?: { name?: string };
  spec?: unknown;
}

/**
 * The PolicyServers whose TLS depends on the Secret `secret` of rollcall's namespace: those
 * whose caSecretRef names it, and for rollcall-managed servers the webhook CA and their own
 * serving Secret.
 */
export function serversUsingSecret(secret: string, servers: readonly ServerLike[]): string[] {
  return servers.flatMap((s) => {
    const name = s.metadata?.name;
    const spec = (s.spec ?? {}) as {
      image?: unknown;
      caBundle?: unknown;
      caSecretRef?: { name?: unknown };
    };
    if (!name) return [];
    if (spec.caSecretRef !== undefined) return spec.caSecretRef.name === secret ? [name] : [];
    const managed = spec.image === undefined && spec.caBundle === undefined;
    return managed && (secret === WEBHOOK_CA_SECRET || secret === servingSecretName(name))
      ? [name]
      : [];
  });
}
