// Whether a serving certificate is one a webhook caller will accept: signed by a CA of the
// bundle, valid now, naming every DNS name the caller may use, and (given the key) usable.
// Node's own X.509 checks do the cryptography.
import { createPrivateKey, X509Certificate } from 'node:crypto';
import { splitPemCertificates } from './inspect.ts';

export type Verification = { ok: true } | { ok: false; reason: string };

export interface VerifyServingOptions {
  /** One or more CA certificates (PEM bundle); one of them must have signed the certificate. */
  caPem: string;
  certPem: string;
  /** The certificate's private key; when given, it must belong to the certificate. */
  keyPem?: string;
  dnsNames: readonly string[];
  now: Date;
}

const fail = (reason: string): Verification => ({ ok: false, reason });

function parse(pem: string): X509Certificate | undefined {
  try {
    return new X509Certificate(pem);
  } catch {
    return undefined;
  }
}

export function verifyServingCertificate({
  caPem,
  certPem,
  keyPem,
  dnsNames,
  now,
}: VerifyServingOptions): Verification {
  const certBlock = splitPemCertificates(certPem)[0];
  const cert = certBlock === undefined ? undefined : parse(certBlock);
  if (cert === undefined) return fail('the certificate is not a readable PEM certificate');
  const cas = splitPemCertificates(caPem)
    .map(parse)
    .filter((c): c is X509Certificate => c !== undefined && c.ca);
  if (cas.length === 0) return fail('the CA bundle holds no readable CA certificate');

  const issuer = cas.find((ca) => cert.checkIssued(ca) && cert.verify(ca.publicKey));
  if (issuer === undefined)
    return fail(
      `the certificate (issuer "${cert.issuer}") does not chain to the CA (${cas.map((c) => `"${c.subject}"`).join(', ')})`,
    );
  const t = now.getTime();
  if (t < cert.validFromDate.getTime())
    return fail(`the certificate is not valid before ${cert.validFromDate.toISOString()}`);
  if (t >= cert.validToDate.getTime())
    return fail(`the certificate expired at ${cert.validToDate.toISOString()}`);
  if (t >= issuer.validToDate.getTime())
    return fail(`its CA expired at ${issuer.validToDate.toISOString()}`);

  // Only subject alternative names count, as for Go's verifier (no common-name fallback).
  const missing = dnsNames.filter((name) => cert.checkHost(name, { subject: 'never' }) !== name);
  if (missing.length > 0) return fail(`the certificate does not name ${missing.join(', ')}`);

  if (keyPem !== undefined) {
    let matches = false;
    try {
      matches = cert.checkPrivateKey(createPrivateKey(keyPem));
    } catch {
      return fail('the private key is not a readable PEM key');
    }
    if (!matches) return fail('the private key does not belong to the certificate');
  }
  return { ok: true };
}

/** True when `keyPem` is the private key of the first certificate in `certPem`. */
export function keyMatchesCertificate(certPem: string, keyPem: string): boolean {
  const block = splitPemCertificates(certPem)[0];
  const cert = block === undefined ? undefined : parse(block);
  if (cert === undefined) return false;
  try {
    return cert.checkPrivateKey(createPrivateKey(keyPem));
  } catch {
    return false;
  }
}
