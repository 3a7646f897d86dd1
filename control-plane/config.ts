// Configuration of every role, from flags with environment fallbacks. Pure: argv and env in,
// a validated Config (or an error an operator can act on) out.
import { hostname } from 'node:os';
import { parseArgs } from 'node:util';
import { DEFAULT_POLICY_SERVER_IMAGE, DEFAULT_PROTECTED_NAMESPACES } from '../api/constants.ts';
import { parseRedisUrl, RedisUrlError, withPasswords } from '../lib/redis/url.ts';
import {
  CONTROLLER_SERVICE_ACCOUNTS,
  DEFAULT_POLICY_SERVER_SERVICE_ACCOUNTS,
  type PolicyServerGuard,
} from './functions/policyserver-guard.ts';

export interface Config {
  /** HTTP port for probes, metrics, the status page and the queue UI. */
  port: number;
  /**
   * --redis-url with REDIS_PASSWORD and REDIS_SENTINEL_PASSWORD put in: a secret, which the
   * logger censors by this name; show it only through redact().
   */
  redisUrl: string;
  /** rollcall's namespace: policy servers live here and every webhook excludes it. */
  namespace: string;
  /** Path to a kubeconfig; empty: KUBECONFIG, then in-cluster. */
  kubeconfig: string | undefined;
  /** Jobs one worker process runs at once. */
  concurrency: number;
  /**
   * An opt-in cap on writes per second to the Kubernetes API, shared by all workers, and its
   * burst; undefined: no client-side limit (API Priority and Fairness decides, 429s pause).
   */
  writeRate: number | undefined;
  writeBurst: number | undefined;
  /** Register webhooks by this base URL instead of the policy server's Service (out-of-cluster development). */
  webhookUrl: string | undefined;
  /** PEM file of the CA for webhooks registered by URL. */
  webhookCaFile: string | undefined;
  /**
   * Namespaces every webhook excludes besides rollcall's own (which it always excludes):
   * kube-system and kube-node-lease by default.
   */
  protectedNamespaces: string[];
  /**
   * How long a job's lock lives without renewal: a worker that dies mid-job leaves its key
   * locked this long before another worker runs it again.
   */
  jobLockMs: number;
  logLevel: string;
  /** This replica's identity in leader election. */
  identity: string;
  installCrds: boolean;
  /** Queue UI credentials (`user:password`); empty and not local-only: the UI is off. */
  uiCredentials: string | undefined;
  uiLocalOnly: boolean;
  uiReadOnly: boolean;
  /** Coalesce enqueues per key; off only as the benchmark's per-event baseline. */
  coalesce: boolean;
  /** The image of PolicyServers without spec.image (rollcall's own, as `rollcall policy-server`). */
  policyServerImage: string;
  /** Validity of the webhook CA rollcall creates. */
  caValidityMs: number;
  /** Validity of each serving certificate rollcall issues (renewed after two thirds). */
  servingCertValidityMs: number;
  /** Time for a new CA bundle or certificate to reach the API server and the pods' files. */
  tlsPropagationDelayMs: number;
  /** What a PolicyServer may name: accounts, image prefixes, protected Secrets (policyserver-guard.ts). */
  policyServerGuard: Required<PolicyServerGuard>;
}

const HOUR_MS = 3_600_000;
const DURATION_UNITS_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: HOUR_MS };
/** The webhook CA's validity when --ca-validity is not given: 5 years. */
export const DEFAULT_CA_VALIDITY_MS = 43_800 * HOUR_MS;
/** A serving certificate's validity when --serving-cert-validity is not given: a year. */
export const DEFAULT_SERVING_CERT_VALIDITY_MS = 8_760 * HOUR_MS;
/**
 * Time for a new CA bundle to reach the API server and a new certificate the pods' files, when
 * --tls-propagation-delay is not given: kubelets update a mounted Secret within about a minute
 * and a half by default.
 */
export const DEFAULT_TLS_PROPAGATION_DELAY_MS = 3 * 60_000;

export class ConfigError extends Error {
  override name = 'ConfigError';
}

/** The flags that take a value: text, checked where it is read. */
const valueFlags = [
  'port',
  'redis-url',
  'namespace',
  'kubeconfig',
  'concurrency',
  'write-rate',
  'write-burst',
  'webhook-url',
  'webhook-ca-file',
  'protected-namespaces',
  'job-lock-ms',
  'log-level',
  'identity',
  'ui-credentials',
  'policy-server-image',
  'ca-validity',
  'serving-cert-validity',
  'tls-propagation-delay',
  'policy-server-service-accounts',
  'policy-server-images',
  'policy-server-protected-secrets',
];
/** The flags that are on when given. */
const switches = ['install-crds', 'ui-local-only', 'ui-allow-actions', 'no-coalesce'];

const configFlags: Record<string, { type: 'string' | 'boolean' }> = Object.fromEntries([
  ...valueFlags.map((flag) => [flag, { type: 'string' as const }]),
  ...switches.map((flag) => [flag, { type: 'boolean' as const }]),
]);

export const configHelp = `options (flag, then environment variable, then default):
  --port N               HTTP port (PORT, 8080)
  --redis-url URL        Redis for the queue and projections (REDIS_URL, required): redis://HOST:PORT[/DB],
                         redis+sentinel://HOST:PORT,HOST:PORT/MASTER[?db=N] or redis+cluster://HOST:PORT,...;
                         rediss… for TLS, with ?caFile=PEM for a private CA. Passwords in the URL or, kept out
                         of it, in REDIS_PASSWORD and (Sentinels) REDIS_SENTINEL_PASSWORD: environment only
  --namespace NS         rollcall's namespace (ROLLCALL_NAMESPACE, rollcall-system)
  --kubeconfig PATH      (KUBECONFIG, else in-cluster config)
  --concurrency N        jobs per worker process (ROLLCALL_CONCURRENCY, 8)
  --write-rate N         cap API writes/s shared by all workers (ROLLCALL_WRITE_RATE, no cap:
                         API Priority and Fairness decides; 429s pause every worker)
  --write-burst N        burst of that cap (ROLLCALL_WRITE_BURST, twice the rate)
  --webhook-url URL      register webhooks by URL, for out-of-cluster development (ROLLCALL_WEBHOOK_URL)
  --webhook-ca-file F    CA (PEM) of that URL (ROLLCALL_WEBHOOK_CA_FILE)
  --protected-namespaces NS,NS  namespaces no webhook intercepts, besides rollcall's own which none ever does
                         (ROLLCALL_PROTECTED_NAMESPACES, ${DEFAULT_PROTECTED_NAMESPACES.join(',')}; empty: only rollcall's own)
  --job-lock-ms N        a dead worker's job runs again after this (ROLLCALL_JOB_LOCK_MS, 30000)
  --log-level L          pino level (LOG_LEVEL, info)
  --identity ID          leader-election identity (POD_NAME, host-pid)
  --install-crds         apply the CRDs at start (local use)
  --ui-credentials U:P   queue UI basic auth (ROLLCALL_UI_CREDENTIALS)
  --ui-local-only        serve the status page and queue UI to loopback clients only
  --ui-allow-actions     let the queue UI retry/clean jobs (read-only by default)
  --no-coalesce          one run per event, for benchmarks (ROLLCALL_COALESCE=false)
  --policy-server-image I  image of PolicyServers without spec.image (ROLLCALL_POLICY_SERVER_IMAGE, ${DEFAULT_POLICY_SERVER_IMAGE})
  --ca-validity D        validity of the webhook CA rollcall creates, e.g. 43800h (ROLLCALL_CA_VALIDITY, ${formatDuration(DEFAULT_CA_VALIDITY_MS)} = 5 years)
  --serving-cert-validity D  validity of the serving certificates it issues, e.g. 8760h, 90s (ROLLCALL_SERVING_CERT_VALIDITY, ${formatDuration(DEFAULT_SERVING_CERT_VALIDITY_MS)})
  --tls-propagation-delay D  how long a CA rotation waits for webhooks and mounted Secrets to update (ROLLCALL_TLS_PROPAGATION_DELAY, ${formatDuration(DEFAULT_TLS_PROPAGATION_DELAY_MS)})
  --policy-server-service-accounts SA,SA  the accounts a PolicyServer's spec.serviceAccountName may name, unset always allowed
                         (ROLLCALL_POLICY_SERVER_SERVICE_ACCOUNTS, ${DEFAULT_POLICY_SERVER_SERVICE_ACCOUNTS.join(',')}; empty: none;
                         never ${CONTROLLER_SERVICE_ACCOUNTS.join(' or ')})
  --policy-server-images P,P  prefixes a PolicyServer's spec.image must start with (ROLLCALL_POLICY_SERVER_IMAGES, empty: any image)
  --policy-server-protected-secrets S,S  Secrets no PolicyServer may reference, besides rollcall-* and other servers'
                         policy-server-<name>-tls (ROLLCALL_POLICY_SERVER_PROTECTED_SECRETS, none)`;

/** A namespace's name: a DNS-1123 label. */
const NAMESPACE_NAME = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;

/**
 * The comma-separated namespace names of `--protected-namespaces`; blanks around and between
 * commas are ignored, so an empty text is an empty list.
 */
export function parseNamespaceList(text: string): string[] {
  const names = text
    .split(',')
    .map((name) => name.trim())
    .filter((name) => name !== '');
  const bad = names.find((name) => !NAMESPACE_NAME.test(name));
  if (bad !== undefined)
    throw new ConfigError(
      `--protected-namespaces (ROLLCALL_PROTECTED_NAMESPACES) must be namespace names separated by commas, got ${JSON.stringify(bad)}`,
    );
  return [...new Set(names)];
}

/** A DNS-1123 subdomain: the name of a ServiceAccount or a Secret. */
const OBJECT_NAME = /^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/;

const commaList = (text: string) => [
  ...new Set(
    text
      .split(',')
      .map((item) => item.trim())
      .filter((item) => item !== ''),
  ),
];

/**
 * What a PolicyServer may name, from the `--policy-server-*` flags (parsed `values`), else
 * their variables; an empty one counts (an empty account list allows none).
 */
export function parsePolicyServerGuard(
  values: Record<string, string | boolean | undefined>,
  env: NodeJS.ProcessEnv,
): Required<PolicyServerGuard> {
  const text = (flag: string, envName: string): string | undefined => {
    const value = values[flag];
    return typeof value === 'string' ? value : env[envName];
  };
  const names = (flag: string, envName: string, what: string): string[] | undefined => {
    const raw = text(flag, envName);
    if (raw === undefined) return undefined;
    const list = commaList(raw);
    const bad = list.find((name) => !OBJECT_NAME.test(name));
    if (bad !== undefined)
      throw new ConfigError(
        `--${flag} (${envName}) must be ${what} names separated by commas, got ${JSON.stringify(bad)}`,
      );
    return list;
  };
  const serviceAccounts = names(
    'policy-server-service-accounts',
    'ROLLCALL_POLICY_SERVER_SERVICE_ACCOUNTS',
    'ServiceAccount',
  ) ?? [...DEFAULT_POLICY_SERVER_SERVICE_ACCOUNTS];
  const controllers = serviceAccounts.filter((a) => CONTROLLER_SERVICE_ACCOUNTS.includes(a));
  if (controllers.length > 0)
    throw new ConfigError(
      `--policy-server-service-accounts (ROLLCALL_POLICY_SERVER_SERVICE_ACCOUNTS) names ${controllers.join(', ')}: rollcall's controllers' accounts (${CONTROLLER_SERVICE_ACCOUNTS.join(', ')}) are never a PolicyServer's, whatever this flag says; list the policy servers' own accounts (default ${DEFAULT_POLICY_SERVER_SERVICE_ACCOUNTS.join(',')})`,
    );
  const images = commaList(text('policy-server-images', 'ROLLCALL_POLICY_SERVER_IMAGES') ?? '');
  const badImage = images.find((prefix) => /\s/.test(prefix));
  if (badImage !== undefined)
    throw new ConfigError(
      `--policy-server-images (ROLLCALL_POLICY_SERVER_IMAGES) must be image prefixes such as registry.example/policy/ separated by commas, got ${JSON.stringify(badImage)}`,
    );
  const protectedSecrets =
    names(
      'policy-server-protected-secrets',
      'ROLLCALL_POLICY_SERVER_PROTECTED_SECRETS',
      'Secret',
    ) ?? [];
  return { serviceAccounts, images, protectedSecrets };
}

/**
 * A Go-style duration (`8760h`, `30s`, `1h30m`, `1.5h`, `500ms`) in milliseconds, or undefined
 * when the text is not one. Days are not a unit, as in Go: say `720h`.
 */
export function parseDuration(text: string): number | undefined {
  if (!/^(\d+(\.\d+)?(ms|s|m|h))+$/.test(text)) return undefined;
  let ms = 0;
  for (const [, amount, unit] of text.matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h)/g))
    ms += Number(amount) * DURATION_UNITS_MS[unit!]!;
  return Math.round(ms);
}

/** Whole milliseconds as parseDuration reads them, in the largest unit that fits: `43800h`, `3m`. */
export function formatDuration(ms: number): string {
  const [unit, size] = Object.entries(DURATION_UNITS_MS)
    .sort(([, a], [, b]) => b - a)
    .find(([, size]) => ms % size === 0)!;
  return `${ms / size}${unit}`;
}

export function parseConfig(argv: string[], env: NodeJS.ProcessEnv): Config {
  let values: Record<string, string | boolean | undefined>;
  try {
    values = parseArgs({
      args: argv,
      options: configFlags,
      strict: true,
      allowPositionals: false,
    }).values;
  } catch (err) {
    throw new ConfigError(`${(err as Error).message}\n\n${configHelp}`);
  }
  const str = (
    flag: string,
    envName: string | undefined,
    fallback?: string,
  ): string | undefined => {
    const v = values[flag];
    if (typeof v === 'string' && v !== '') return v;
    const e = envName ? env[envName] : undefined;
    return e !== undefined && e !== '' ? e : fallback;
  };
  const wholeNumber = (flag: string, envName: string, raw: string, min: number): number => {
    const n = Number(raw);
    if (!Number.isInteger(n) || n < min)
      throw new ConfigError(
        `--${flag} (${envName}) must be a whole number ≥ ${min}, got ${JSON.stringify(raw)}`,
      );
    return n;
  };
  const int = (flag: string, envName: string, fallback: number, min: number): number => {
    const raw = str(flag, envName, String(fallback))!;
    return wholeNumber(flag, envName, raw, min);
  };
  const optionalInt = (flag: string, envName: string, min: number): number | undefined => {
    const raw = str(flag, envName);
    return raw === undefined ? undefined : wholeNumber(flag, envName, raw, min);
  };
  const givenRedisUrl = str('redis-url', 'REDIS_URL');
  if (!givenRedisUrl)
    throw new ConfigError('no Redis: pass --redis-url redis://HOST:6379 or set REDIS_URL');
  let redisUrl: string;
  try {
    // Passwords from the environment (a Secret's keys), never from flags: argv is public.
    redisUrl = withPasswords(givenRedisUrl, {
      password: env.REDIS_PASSWORD || undefined,
      sentinelPassword: env.REDIS_SENTINEL_PASSWORD || undefined,
    });
    parseRedisUrl(redisUrl);
  } catch (err) {
    if (err instanceof RedisUrlError) throw new ConfigError(err.message);
    throw err;
  }
  const duration = (flag: string, envName: string, fallbackMs: number, minMs: number): number => {
    const raw = str(flag, envName, formatDuration(fallbackMs))!;
    const ms = parseDuration(raw);
    if (ms === undefined || ms < minMs)
      throw new ConfigError(
        `--${flag} (${envName}) must be a duration of at least ${minMs / 1000} s such as 8760h, 30m or 90s, got ${JSON.stringify(raw)}`,
      );
    return ms;
  };
  const writeRate = optionalInt('write-rate', 'ROLLCALL_WRITE_RATE', 1);
  const writeBurst = optionalInt('write-burst', 'ROLLCALL_WRITE_BURST', 1);
  if (writeBurst !== undefined && writeRate === undefined)
    throw new ConfigError(
      '--write-burst (ROLLCALL_WRITE_BURST) sets the burst of a --write-rate cap: set --write-rate too, or neither (no client-side limit)',
    );
  // Unlike the other settings, an empty value counts: it protects rollcall's namespace only.
  const protectedFlag = values['protected-namespaces'];
  const protectedText =
    typeof protectedFlag === 'string' ? protectedFlag : env.ROLLCALL_PROTECTED_NAMESPACES;
  const protectedNamespaces =
    protectedText === undefined
      ? [...DEFAULT_PROTECTED_NAMESPACES]
      : parseNamespaceList(protectedText);
  const uiCredentials = str('ui-credentials', 'ROLLCALL_UI_CREDENTIALS');
  if (uiCredentials !== undefined && !/^[^:]+:.+$/.test(uiCredentials))
    throw new ConfigError('--ui-credentials must be USER:PASSWORD');
  return {
    port: int('port', 'PORT', 8080, 0),
    redisUrl,
    namespace: str('namespace', 'ROLLCALL_NAMESPACE', 'rollcall-system')!,
    kubeconfig: str('kubeconfig', 'KUBECONFIG'),
    concurrency: int('concurrency', 'ROLLCALL_CONCURRENCY', 8, 1),
    writeRate,
    writeBurst,
    webhookUrl: str('webhook-url', 'ROLLCALL_WEBHOOK_URL'),
    webhookCaFile: str('webhook-ca-file', 'ROLLCALL_WEBHOOK_CA_FILE'),
    protectedNamespaces,
    jobLockMs: int('job-lock-ms', 'ROLLCALL_JOB_LOCK_MS', 30_000, 100),
    logLevel: str('log-level', 'LOG_LEVEL', 'info')!,
    identity: str('identity', 'POD_NAME', `${hostname()}-${process.pid}`)!,
    installCrds: values['install-crds'] === true,
    uiCredentials,
    uiLocalOnly: values['ui-local-only'] === true,
    uiReadOnly: values['ui-allow-actions'] !== true,
    coalesce: values['no-coalesce'] !== true && env.ROLLCALL_COALESCE !== 'false',
    policyServerImage: str(
      'policy-server-image',
      'ROLLCALL_POLICY_SERVER_IMAGE',
      DEFAULT_POLICY_SERVER_IMAGE,
    )!,
    // Certificates shorter than a few seconds would be re-issued faster than pods reload them.
    caValidityMs: duration('ca-validity', 'ROLLCALL_CA_VALIDITY', DEFAULT_CA_VALIDITY_MS, 10_000),
    servingCertValidityMs: duration(
      'serving-cert-validity',
      'ROLLCALL_SERVING_CERT_VALIDITY',
      DEFAULT_SERVING_CERT_VALIDITY_MS,
      3_000,
    ),
    tlsPropagationDelayMs: duration(
      'tls-propagation-delay',
      'ROLLCALL_TLS_PROPAGATION_DELAY',
      DEFAULT_TLS_PROPAGATION_DELAY_MS,
      1_000,
    ),
    policyServerGuard: parsePolicyServerGuard(values, env),
  };
}
