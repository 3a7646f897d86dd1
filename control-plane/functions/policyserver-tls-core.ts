/**
 * The pure core of a PolicyServer's TLS as rollcall reports it: a `spec.caSecretRef` Secret
 * someone else maintains (cert-manager writes `ca.crt`, `tls.crt`, `tls.key`), whether the
 * webhooks may trust it, the certificate facts for the status, and when to warn that a
 * certificate rollcall cannot renew is about to expire.
 *
 * A webhook is never pointed at a server it cannot verify: a Secret that is missing, holds
 * no CA, or whose certificate does not chain to that CA or does not name the Service is a
 * problem (the PolicyServer is Stalled with it) and no webhook gets its bundle.
 */
import type { V1Secret } from '@kubernetes/client-node';
import type { PolicyServer, PolicyServerCertificate } from '../../api/v1alpha1.ts';
import {
  inspectCertificate,
  splitPemCertificates,
  verifyServingCertificate,
  type CertificateFacts,
} from '../../lib/certs/index.ts';
import { secretText, servingDnsNames } from './managed-tls-core.ts';

const DAY_MS = 24 * 3_600_000;
/** A certificate rollcall cannot renew gets a Warning Event this long before it expires. */
export const EXPIRY_WARNING_MS = 30 * DAY_MS;

/** Why a PolicyServer's TLS cannot be trusted: a kstatus reason and a message to act on. */
export interface TlsProblem {
  reason: 'TLSSecretNotFound' | 'TLSSecretInvalid';
  message: string;
}

export type ReferencedTls =
  | {
      kind: 'ok';
      /** The CA bundle (PEM) of the Secret's CA key: what the webhooks trust. */
      caPem: string;
      /** The serving certificate's facts, when the Secret holds one. */
      certificate?: CertificateFacts;
    }
  | { kind: 'problem'; problem: TlsProblem };

/**
 * Reads the Secret a PolicyServer's `spec.caSecretRef` names. A server of rollcall's image
 * serves the Secret's `tls.crt`, so it must be there and verify; a server with an image of its
 * own may bring its certificate another way, and `tls.crt` is checked only when present.
 */
export function readReferencedTls(
  secret: V1Secret | undefined,
  server: PolicyServer,
  namespace: string,
  now: Date,
): ReferencedTls {
  const ref = server.spec.caSecretRef;
  const name = ref?.name ?? '';
  const key = ref?.key ?? 'ca.crt';
  const where = `Secret ${namespace}/${name} (spec.caSecretRef of PolicyServer ${server.metadata.name})`;
  const problem = (reason: TlsProblem['reason'], message: string): ReferencedTls => ({
    kind: 'problem',
    problem: { reason, message },
  });
  if (secret === undefined)
    return problem(
      'TLSSecretNotFound',
      `${where} does not exist; create it (e.g. with a cert-manager Certificate) in rollcall's namespace`,
    );
  const caPem = secretText(secret.data, key);
  if (caPem === undefined || splitPemCertificates(caPem).length === 0)
    return problem(
      'TLSSecretInvalid',
      `${where} holds no CA certificate under ${key}; with cert-manager, use an issuer that writes ca.crt (CA or self-signed issuer)`,
    );
  const certPem = secretText(secret.data, 'tls.crt');
  const own = server.spec.image === undefined;
  if (certPem === undefined) {
    if (own)
      return problem(
        'TLSSecretInvalid',
        `${where} holds no tls.crt for the policy server to serve`,
      );
    return { kind: 'ok', caPem };
  }
  const keyPem = secretText(secret.data, 'tls.key');
  if (own && keyPem === undefined)
    return problem('TLSSecretInvalid', `${where} holds no tls.key for its tls.crt`);
  const verdict = verifyServingCertificate({
    caPem,
    certPem,
    ...(keyPem === undefined ? {} : { keyPem }),
    // The API server calls <service>.<namespace>.svc.
    dnsNames: servingDnsNames(server.metadata.name, namespace).slice(0, 1),
    now,
  });
  if (!verdict.ok)
    return problem(
      'TLSSecretInvalid',
      `${where} cannot be trusted for the webhooks: ${verdict.reason}`,
    );
  return { kind: 'ok', caPem, certificate: inspectCertificate(certPem) };
}

/** The status' view of a serving certificate. */
export function certificateStatus(
  facts: CertificateFacts,
  secret: string,
  renewedBy: 'rollcall' | 'external',
  now: Date,
): PolicyServerCertificate {
  return {
    secret,
    issuer: facts.issuer,
    notBefore: facts.notBefore.toISOString(),
    notAfter: facts.notAfter.toISOString(),
    renewedBy,
    ...(renewedBy === 'external' && expiresSoon(facts.notAfter, now) ? { expiresSoon: true } : {}),
  };
}

export function expiresSoon(notAfter: Date, now: Date): boolean {
  return notAfter.getTime() - now.getTime() <= EXPIRY_WARNING_MS;
}

/**
 * The Warning to record now, if any: a certificate rollcall cannot renew entered its last 30
 * days (the previous status did not say so for this certificate yet). Once per certificate.
 */
export function expiryWarning(
  previous: PolicyServerCertificate | undefined,
  next: PolicyServerCertificate | undefined,
  now: Date,
): string | undefined {
  if (next?.expiresSoon !== true) return undefined;
  if (previous?.expiresSoon === true && previous.notAfter === next.notAfter) return undefined;
  const days = Math.max(0, Math.floor((Date.parse(next.notAfter) - now.getTime()) / DAY_MS));
  return `The serving certificate in Secret ${next.secret} expires at ${next.notAfter} (in ${days} days) and rollcall cannot renew it (spec.caSecretRef): renew it where it is issued (e.g. cert-manager), or the API server stops trusting the policy server.`;
}

/** When a certificate rollcall cannot renew next needs a look: its warning time, then its expiry. */
export function externalRecheckAt(notAfter: Date, now: Date): Date {
  const warnAt = new Date(notAfter.getTime() - EXPIRY_WARNING_MS);
  return now < warnAt ? warnAt : notAfter;
}
