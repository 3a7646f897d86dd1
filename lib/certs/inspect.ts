// Reading certificates: what rollcall decides on (validity window, names, CA or not).
import { x509 } from './x509.ts';

export interface CertificateFacts {
  subject: string;
  issuer: string;
  serialNumber: string;
  notBefore: Date;
  notAfter: Date;
  /** The DNS subject alternative names, in certificate order. */
  dnsNames: string[];
  /** Basic constraints say it may sign certificates. */
  isCa: boolean;
}

/** The PEM blocks of a bundle (`ca.crt` may hold several CAs), each as its own PEM string. */
export function splitPemCertificates(pem: string): string[] {
  return pem.match(/-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g) ?? [];
}

/** Facts of the first certificate in `pem`; throws with a readable message if there is none. */
export function inspectCertificate(pem: string): CertificateFacts {
  const first = splitPemCertificates(pem)[0];
  if (first === undefined) throw new Error('no PEM certificate found');
  const cert = new x509.X509Certificate(first);
  const san = cert.getExtension(x509.SubjectAlternativeNameExtension);
  return {
    subject: cert.subject,
    issuer: cert.issuer,
    serialNumber: cert.serialNumber,
    notBefore: cert.notBefore,
    notAfter: cert.notAfter,
    dnsNames: (san?.names.items ?? []).filter((n) => n.type === 'dns').map((n) => n.value),
    isCa: cert.getExtension(x509.BasicConstraintsExtension)?.ca === true,
  };
}
