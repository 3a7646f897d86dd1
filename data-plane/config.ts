// Configuration of `rollcall policy-server`, from flags with environment fallbacks. Pure:
// argv and env in, a validated config (or an error an operator can act on) out. A later flag
// overrides an earlier one, so the local node agent can append `--address=127.0.0.1 --port=N`.
import { parseArgs } from 'node:util';
import {
  POLICY_SERVER_CONTAINER_PORT,
  POLICY_SERVER_ENV,
  POLICY_SERVER_TLS_DIR,
} from '../api/constants.ts';
import type { PolicyServerSources } from '../api/v1alpha1.ts';
import { DEFAULT_INGRESS_LIMITS } from './https-server.ts';
import { INLINE_MAX_BODY_BYTES } from './inline.ts';

export interface PolicyServerConfig {
  /** HTTPS port for admission, probes and metrics. */
  port: number;
  /** Interface to bind. */
  address: string;
  /** Directory holding `tls.crt` and `tls.key` (a mounted kubernetes.io/tls Secret). */
  tlsDir: string;
  /**
   * PEM bundle of the CAs whose client certificates may send AdmissionReviews (the
   * apiserver's, from its admission-control kubeconfig); undefined: any client may.
   */
  clientCaFile: string | undefined;
  /** Path to a kubeconfig; undefined: in-cluster. */
  kubeconfig: string | undefined;
  /** The PolicyServer this replica belongs to: it loads the Policies assigned to it. */
  server: string;
  /** This replica's pod: the report goes into its annotation. */
  pod: string;
  /** The pod's namespace. */
  namespace: string;
  logLevel: string;
  /** Evaluation worker threads kept warm; more are started while some are busy. */
  workers: number;
  /** Upper bound of evaluation worker threads. */
  maxWorkers: number;
  /**
   * The largest AdmissionReview body (bytes) evaluated on the main thread when its policy's
   * cost is bounded; larger ones, and other policies, go to the threads. 0: never inline.
   */
  inlineMaxBytes: number;
  /** The largest AdmissionReview body accepted (bytes); 413 beyond. */
  maxReviewBytes: number;
  /** Connections open at once (accepted or handed over); one more is closed unanswered. */
  maxConnections: number;
  /** AdmissionReview requests answered at once; past it, answered by failurePolicy unevaluated. */
  maxInFlight: number;
  /** A TLS handshake not finished within this many seconds is dropped. */
  tlsHandshakeTimeoutSeconds: number;
  /** What spec.source downloads may reach: the PolicyServer's spec.sources, as flags. */
  sources: PolicyServerSources;
}

export class PolicyServerConfigError extends Error {
  override name = 'PolicyServerConfigError';
}

const flags = {
  port: { type: 'string' },
  address: { type: 'string' },
  'tls-dir': { type: 'string' },
  'client-ca-file': { type: 'string' },
  kubeconfig: { type: 'string' },
  server: { type: 'string' },
  pod: { type: 'string' },
  namespace: { type: 'string' },
  'log-level': { type: 'string' },
  workers: { type: 'string' },
  'max-workers': { type: 'string' },
  'inline-max-bytes': { type: 'string' },
  'max-review-bytes': { type: 'string' },
  'max-connections': { type: 'string' },
  'max-in-flight': { type: 'string' },
  'tls-handshake-timeout-seconds': { type: 'string' },
  'sources-allow-insecure-http': { type: 'boolean' },
  'sources-allow-private-destinations': { type: 'boolean' },
} as const;

const limits = DEFAULT_INGRESS_LIMITS;

export const policyServerHelp = `usage: rollcall policy-server --server NAME --pod NAME [options]

Loads the Policies of one PolicyServer (CEL, shaped like ValidatingAdmissionPolicy), reports
what it loaded on its own pod (annotation rollcall.dev/policies) and answers AdmissionReview v1
over HTTPS on POST /validate/<policy>/<generation>; GET /readyz, /healthz, /metrics.

options (flag, then environment variable, then default; a later flag wins):
  --port N            HTTPS port (PORT, ${POLICY_SERVER_CONTAINER_PORT})
  --address IP        interface to bind (0.0.0.0)
  --tls-dir DIR       tls.crt and tls.key, reloaded when they change (ROLLCALL_TLS_DIR, ${POLICY_SERVER_TLS_DIR})
  --client-ca-file PATH  admission requests must come with a client certificate these CAs
                      signed, such as the apiserver's (ROLLCALL_CLIENT_CA_FILE; unset: any
                      client); probes and /metrics need none
  --kubeconfig PATH   (KUBECONFIG, else in-cluster config)
  --server NAME       the PolicyServer this replica serves (${POLICY_SERVER_ENV.server}, required)
  --pod NAME          this pod, which carries the report (${POLICY_SERVER_ENV.pod}, required)
  --namespace NS      this pod's namespace (${POLICY_SERVER_ENV.namespace}, rollcall-system)
  --workers N         evaluation threads kept warm (ROLLCALL_WORKERS, 2)
  --max-workers N     evaluation threads at most, while some are busy (ROLLCALL_MAX_WORKERS, 8)
  --inline-max-bytes N  largest request evaluated on the main thread when its policy's cost
                      is bounded, 0 for never (ROLLCALL_INLINE_MAX_BYTES, ${INLINE_MAX_BODY_BYTES})
  --max-review-bytes N  largest AdmissionReview accepted, 413 beyond
                      (ROLLCALL_MAX_REVIEW_BYTES, ${limits.maxReviewBytes})
  --max-connections N   connections open at once; one more is closed unanswered
                      (ROLLCALL_MAX_CONNECTIONS, ${limits.maxConnections})
  --max-in-flight N     AdmissionReview requests answered at once, at most half of them for
                      one policy; past it a request is answered at once by its policy's
                      failurePolicy, saying the server is overloaded (ROLLCALL_MAX_IN_FLIGHT, ${limits.maxInFlight})
  --tls-handshake-timeout-seconds N  a connection whose TLS handshake has not finished by
                      then is dropped (ROLLCALL_TLS_HANDSHAKE_TIMEOUT_SECONDS, ${limits.tlsHandshakeTimeoutMs / 1000})
  --sources-allow-insecure-http  spec.source may be a plain http:// URL (off: HTTPS only)
  --sources-allow-private-destinations  spec.source may reach loopback and private addresses
                      (off: public only; link-local such as 169.254.169.254 never)
  --log-level L       pino level (LOG_LEVEL, info)`;

/** Parses argv and env; throws a PolicyServerConfigError that says what to fix. */
export function parsePolicyServerConfig(
  argv: readonly string[],
  env: Readonly<Record<string, string | undefined>>,
): PolicyServerConfig {
  let values: Record<string, string | undefined>;
  try {
    values = parseArgs({ args: [...argv], options: flags, strict: true, allowPositionals: false })
      .values as Record<string, string | undefined>;
  } catch (err) {
    throw new PolicyServerConfigError(`${(err as Error).message}\n\n${policyServerHelp}`);
  }
  const str = (flag: string, envName?: string, fallback?: string): string | undefined => {
    const v = values[flag];
    if (v !== undefined && v !== '') return v;
    const e = envName ? env[envName] : undefined;
    return e !== undefined && e !== '' ? e : fallback;
  };
  const int = (
    flag: string,
    envName: string | undefined,
    fallback: number,
    min: number,
    max: number,
  ) => {
    const raw = str(flag, envName, String(fallback))!;
    const n = Number(raw);
    if (!/^\d+$/.test(raw) || n < min || n > max)
      throw new PolicyServerConfigError(
        `--${flag}${envName ? ` (${envName})` : ''} must be a whole number from ${min} to ${max}, got ${JSON.stringify(raw)}`,
      );
    return n;
  };
  const required = (flag: string, envName: string, what: string) => {
    const v = str(flag, envName);
    if (v === undefined)
      throw new PolicyServerConfigError(
        `${what} is unknown: pass --${flag} NAME or set ${envName}`,
      );
    return v;
  };
  const server = required(
    'server',
    POLICY_SERVER_ENV.server,
    'the PolicyServer this replica serves',
  );
  const pod = required('pod', POLICY_SERVER_ENV.pod, 'this replica’s pod');
  const workers = int('workers', 'ROLLCALL_WORKERS', 2, 1, 64);
  const maxWorkers = int('max-workers', 'ROLLCALL_MAX_WORKERS', Math.max(8, workers), 1, 256);
  if (maxWorkers < workers)
    throw new PolicyServerConfigError(
      `--max-workers (${maxWorkers}) must be at least --workers (${workers})`,
    );
  const maxReviewBytes = int(
    'max-review-bytes',
    'ROLLCALL_MAX_REVIEW_BYTES',
    limits.maxReviewBytes,
    64 * 1024,
    256 * 1024 * 1024,
  );
  return {
    port: int('port', 'PORT', POLICY_SERVER_CONTAINER_PORT, 0, 65535),
    address: str('address', undefined, '0.0.0.0')!,
    tlsDir: str('tls-dir', 'ROLLCALL_TLS_DIR', POLICY_SERVER_TLS_DIR)!,
    clientCaFile: str('client-ca-file', 'ROLLCALL_CLIENT_CA_FILE'),
    kubeconfig: str('kubeconfig', 'KUBECONFIG'),
    server,
    pod,
    namespace: str('namespace', POLICY_SERVER_ENV.namespace, 'rollcall-system')!,
    logLevel: str('log-level', 'LOG_LEVEL', 'info')!,
    workers,
    maxWorkers,
    inlineMaxBytes: int(
      'inline-max-bytes',
      'ROLLCALL_INLINE_MAX_BYTES',
      INLINE_MAX_BODY_BYTES,
      0,
      maxReviewBytes,
    ),
    maxReviewBytes,
    maxConnections: int(
      'max-connections',
      'ROLLCALL_MAX_CONNECTIONS',
      limits.maxConnections,
      1,
      1_000_000,
    ),
    maxInFlight: int('max-in-flight', 'ROLLCALL_MAX_IN_FLIGHT', limits.maxInFlight, 1, 1_000_000),
    tlsHandshakeTimeoutSeconds: int(
      'tls-handshake-timeout-seconds',
      'ROLLCALL_TLS_HANDSHAKE_TIMEOUT_SECONDS',
      limits.tlsHandshakeTimeoutMs / 1000,
      1,
      120,
    ),
    sources: {
      allowInsecureHTTP: Boolean(values['sources-allow-insecure-http']),
      allowPrivateDestinations: Boolean(values['sources-allow-private-destinations']),
    },
  };
}
