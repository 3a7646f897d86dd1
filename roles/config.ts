// Configuration of every role, from flags with environment fallbacks. Pure: argv and env in,
// a validated Config (or an error an operator can act on) out.
import { hostname } from 'node:os';
import { parseArgs } from 'node:util';

export interface Config {
  /** HTTP port for probes, metrics, the status page and the queue UI. */
  port: number;
  redisUrl: string;
  /** rollcall's namespace: policy servers live here and every webhook excludes it. */
  namespace: string;
  /** Path to a kubeconfig; empty: KUBECONFIG, then in-cluster. */
  kubeconfig: string | undefined;
  /** Jobs one worker process runs at once. */
  concurrency: number;
  /** Writes per second to the Kubernetes API, shared by all workers, and the burst. */
  writeRate: number;
  writeBurst: number;
  /** Register webhooks by this base URL instead of the policy server's Service (out-of-cluster development). */
  webhookUrl: string | undefined;
  /** PEM file of the CA for webhooks registered by URL. */
  webhookCaFile: string | undefined;
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
}

export class ConfigError extends Error {
  override name = 'ConfigError';
}

export const configFlags = {
  port: { type: 'string' },
  'redis-url': { type: 'string' },
  namespace: { type: 'string' },
  kubeconfig: { type: 'string' },
  concurrency: { type: 'string' },
  'write-rate': { type: 'string' },
  'write-burst': { type: 'string' },
  'webhook-url': { type: 'string' },
  'webhook-ca-file': { type: 'string' },
  'job-lock-ms': { type: 'string' },
  'log-level': { type: 'string' },
  identity: { type: 'string' },
  'install-crds': { type: 'boolean' },
  'ui-credentials': { type: 'string' },
  'ui-local-only': { type: 'boolean' },
  'ui-allow-actions': { type: 'boolean' },
  'no-coalesce': { type: 'boolean' },
} as const;

export const configHelp = `options (flag, then environment variable, then default):
  --port N               HTTP port (PORT, 8080)
  --redis-url URL        Redis for the queue and projections (REDIS_URL, required)
  --namespace NS         rollcall's namespace (ROLLCALL_NAMESPACE, rollcall-system)
  --kubeconfig PATH      (KUBECONFIG, else in-cluster config)
  --concurrency N        jobs per worker process (ROLLCALL_CONCURRENCY, 8)
  --write-rate N         API writes/s shared by all workers (ROLLCALL_WRITE_RATE, 50)
  --write-burst N        (ROLLCALL_WRITE_BURST, 100)
  --webhook-url URL      register webhooks by URL, for out-of-cluster development (ROLLCALL_WEBHOOK_URL)
  --webhook-ca-file F    CA (PEM) of that URL (ROLLCALL_WEBHOOK_CA_FILE)
  --job-lock-ms N        a dead worker's job runs again after this (ROLLCALL_JOB_LOCK_MS, 30000)
  --log-level L          pino level (LOG_LEVEL, info)
  --identity ID          leader-election identity (POD_NAME, host-pid)
  --install-crds         apply the CRDs at start (local use)
  --ui-credentials U:P   queue UI basic auth (ROLLCALL_UI_CREDENTIALS)
  --ui-local-only        serve the status page and queue UI to loopback clients only
  --ui-allow-actions     let the queue UI retry/clean jobs (read-only by default)
  --no-coalesce          one run per event, for benchmarks (ROLLCALL_COALESCE=false)`;

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
  const int = (flag: string, envName: string, fallback: number, min: number): number => {
    const raw = str(flag, envName, String(fallback))!;
    const n = Number(raw);
    if (!Number.isInteger(n) || n < min)
      throw new ConfigError(
        `--${flag} (${envName}) must be a whole number ≥ ${min}, got ${JSON.stringify(raw)}`,
      );
    return n;
  };
  const redisUrl = str('redis-url', 'REDIS_URL');
  if (!redisUrl)
    throw new ConfigError('no Redis: pass --redis-url redis://HOST:6379 or set REDIS_URL');
  if (!/^rediss?:\/\//.test(redisUrl))
    throw new ConfigError(
      `--redis-url must start with redis:// or rediss://, got ${JSON.stringify(redisUrl)}`,
    );
  const uiCredentials = str('ui-credentials', 'ROLLCALL_UI_CREDENTIALS');
  if (uiCredentials !== undefined && !/^[^:]+:.+$/.test(uiCredentials))
    throw new ConfigError('--ui-credentials must be USER:PASSWORD');
  return {
    port: int('port', 'PORT', 8080, 0),
    redisUrl,
    namespace: str('namespace', 'ROLLCALL_NAMESPACE', 'rollcall-system')!,
    kubeconfig: str('kubeconfig', 'KUBECONFIG'),
    concurrency: int('concurrency', 'ROLLCALL_CONCURRENCY', 8, 1),
    writeRate: int('write-rate', 'ROLLCALL_WRITE_RATE', 50, 1),
    writeBurst: int('write-burst', 'ROLLCALL_WRITE_BURST', 100, 1),
    webhookUrl: str('webhook-url', 'ROLLCALL_WEBHOOK_URL'),
    webhookCaFile: str('webhook-ca-file', 'ROLLCALL_WEBHOOK_CA_FILE'),
    jobLockMs: int('job-lock-ms', 'ROLLCALL_JOB_LOCK_MS', 30_000, 100),
    logLevel: str('log-level', 'LOG_LEVEL', 'info')!,
    identity: str('identity', 'POD_NAME', `${hostname()}-${process.pid}`)!,
    installCrds: values['install-crds'] === true,
    uiCredentials,
    uiLocalOnly: values['ui-local-only'] === true,
    uiReadOnly: values['ui-allow-actions'] !== true,
    coalesce: values['no-coalesce'] !== true && env.ROLLCALL_COALESCE !== 'false',
  };
}
