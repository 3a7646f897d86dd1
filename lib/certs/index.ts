// rollcall's X.509: pure functions over PEM strings (no Kubernetes, no I/O).
export {
  createCa,
  issueServingCertificate,
  type CertificateAndKey,
  type CertificateAuthority,
  type CreateCaOptions,
  type IssueServingOptions,
} from './issue.ts';
export { inspectCertificate, splitPemCertificates, type CertificateFacts } from './inspect.ts';
export {
  keyMatchesCertificate,
  verifyServingCertificate,
  type Verification,
  type VerifyServingOptions,
} from './verify.ts';
export { isDueForRenewal, renewalTime, type Lifetime } from './renewal.ts';
