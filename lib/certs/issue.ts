// Issuing certificates: rollcall's webhook CA and the serving certificates it signs. ECDSA
// P-256 keys and SHA-256 signatures through Node's WebCrypto; PEM in and out (PKCS#8 keys).
// Pure apart from the randomness of keys and serial numbers: the time is an argument.
import type { webcrypto } from 'node:crypto';
import { x509 } from './x509.ts';

/** A certificate and its private key, both PEM. */
export interface CertificateAndKey {
  certPem: string;
  keyPem: string;
}

/** rollcall's CA: a self-signed certificate that may sign serving certificates, and its key. */
export type CertificateAuthority = CertificateAndKey;

const KEY_ALGORITHM = { name: 'ECDSA', namedCurve: 'P-256' } as const;
const SIGNING_ALGORITHM = { name: 'ECDSA', hash: 'SHA-256' } as const;

export interface CreateCaOptions {
  commonName: string;
  validityMs: number;
  now: Date;
}

export interface IssueServingOptions {
  ca: CertificateAuthority;
  /** Subject alternative names; the first is also the subject's common name. */
  dnsNames: readonly string[];
  /** Capped at the CA's own expiry: a certificate never outlives what verifies it. */
  validityMs: number;
  now: Date;
}

export async function createCa({
  commonName,
  validityMs,
  now,
}: CreateCaOptions): Promise<CertificateAuthority> {
  const keys = await newKeyPair();
  const { notBefore, notAfter } = validity(now, validityMs);
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: randomSerialNumber(),
    name: [{ CN: [commonName] }],
    notBefore,
    notAfter,
    keys,
    signingAlgorithm: SIGNING_ALGORITHM,
    extensions: [
      // May sign end-entity certificates only (path length 0).
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(
        x509.KeyUsageFlags.keyCertSign |
          x509.KeyUsageFlags.cRLSign |
          x509.KeyUsageFlags.digitalSignature,
        true,
      ),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  return { certPem: cert.toString('pem'), keyPem: await privateKeyPem(keys.privateKey) };
}

export async function issueServingCertificate({
  ca,
  dnsNames,
  validityMs,
  now,
}: IssueServingOptions): Promise<CertificateAndKey> {
  if (dnsNames.length === 0) throw new Error('a serving certificate needs at least one DNS name');
  const caCert = new x509.X509Certificate(x509.PemConverter.decodeFirst(ca.certPem));
  const caKey = await importSigningKey(ca.keyPem);
  const caKeyId = caCert.getExtension(x509.SubjectKeyIdentifierExtension)?.keyId;
  const keys = await newKeyPair();
  const wanted = validity(now, validityMs);
  const notAfter = wanted.notAfter > caCert.notAfter ? caCert.notAfter : wanted.notAfter;
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: randomSerialNumber(),
    subject: [{ CN: [dnsNames[0]!] }],
    // The CA's subject exactly as encoded in its certificate, so chain building matches it.
    issuer: caCert.subjectName,
    notBefore: wanted.notBefore,
    notAfter,
    publicKey: keys.publicKey,
    signingKey: caKey,
    signingAlgorithm: SIGNING_ALGORITHM,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      new x509.SubjectAlternativeNameExtension(dnsNames.map((value) => ({ type: 'dns', value }))),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
      ...(caKeyId === undefined ? [] : [new x509.AuthorityKeyIdentifierExtension(caKeyId)]),
    ],
  });
  return { certPem: cert.toString('pem'), keyPem: await privateKeyPem(keys.privateKey) };
}

/** X.509 times have whole seconds: round `now` down so notBefore is never in the future. */
function validity(now: Date, validityMs: number): { notBefore: Date; notAfter: Date } {
  if (!(validityMs >= 1000)) throw new Error(`validity must be at least 1 s, got ${validityMs} ms`);
  const start = Math.floor(now.getTime() / 1000) * 1000;
  return { notBefore: new Date(start), notAfter: new Date(start + validityMs) };
}

function newKeyPair(): Promise<webcrypto.CryptoKeyPair> {
  return globalThis.crypto.subtle.generateKey(KEY_ALGORITHM, true, ['sign', 'verify']);
}

async function privateKeyPem(key: webcrypto.CryptoKey): Promise<string> {
  const der = await globalThis.crypto.subtle.exportKey('pkcs8', key);
  return x509.PemConverter.encode(der, 'PRIVATE KEY');
}

async function importSigningKey(pem: string): Promise<webcrypto.CryptoKey> {
  try {
    return await globalThis.crypto.subtle.importKey(
      'pkcs8',
      x509.PemConverter.decodeFirst(pem),
      KEY_ALGORITHM,
      false,
      ['sign'],
    );
  } catch (err) {
    throw new Error(`the CA key is not a PKCS#8 PEM ECDSA P-256 key: ${(err as Error).message}`);
  }
}

/** 16 random bytes, positive as RFC 5280 requires (high bit clear). */
function randomSerialNumber(): string {
  const bytes = globalThis.crypto.getRandomValues(new Uint8Array(16));
  bytes[0] = (bytes[0]! & 0x7f) | 0x01;
  return Buffer.from(bytes).toString('hex');
}
