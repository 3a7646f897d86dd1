// The roles rollcall runs as: watcher, worker, or both in one process (`rollcall run`).
// Each is a thin shell wiring the pure functions to Kubernetes, Redis and HTTP.
import { readFileSync } from 'node:fs';
import { pino, type DestinationStream, type Logger } from 'pino';
import { Counter, Registry, collectDefaultMetrics } from 'prom-client';
import { functions } from '../functions/index.ts';
import { KubeWriter } from '../functions/kube-writer.ts';
import type { FunctionContext } from '../functions/types.ts';
import { ProjectionStore } from '../projections/store.ts';
import {
  createRedis,
  QueueMetrics,
  runWorker,
  WorkQueue,
  type Handler,
  type RunningWorker,
} from '../queue/index.ts';
import { startHttpServer, type HttpServer, type Readiness } from '../server/http.ts';
import { mountUis } from '../server/ui.ts';
import { Watcher } from '../watcher/watcher.ts';
import type { Config } from './config.ts';
import { installCrds } from './install-crds.ts';
import { loadKubeConfig } from './kube-config.ts';

export type Role = 'watcher' | 'worker';

/** Paths pino censors in every log line, whatever object a line carries. */
export const redactedPaths = [
  'token',
  '*.token',
  'password',
  '*.password',
  'authorization',
  '*.authorization',
  'headers.authorization',
  '*.headers.authorization',
  'uiCredentials',
  '*.uiCredentials',
  'credentials',
  '*.credentials',
  // A Redis URL may carry a password (redis://:secret@host).
  'redisUrl',
  '*.redisUrl',
];

export function createLogger(level: string, destination?: DestinationStream): Logger {
  const options = { level, redact: { paths: redactedPaths, censor: '[redacted]' } };
  return destination ? pino(options, destination) : pino(options);
}

/** Counts Kubernetes API writes by verb and HTTP status code (0: no response). */
export function kubeRequestCounter(registry: Registry): (verb: string, code: number) => void {
  const counter = new Counter({
    name: 'rollcall_kube_requests_total',
    help: 'Kubernetes API write requests made by worker functions, by verb and HTTP status code (0: no response)',
    labelNames: ['verb', 'code'],
    registers: [registry],
  });
  return (verb, code) => counter.inc({ verb, code: String(code) });
}

/** Resolves true when `p` settles in time, false otherwise (p keeps running). */
function bounded(p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p.then(
      () => true,
      () => true,
    ),
    new Promise<boolean>((r) => (timer = setTimeout(() => r(false), ms))),
  ]).finally(() => clearTimeout(timer));
}

/** /readyz for the given roles: Redis answers, and a leading watcher has synced its informers. */
export async function readiness(
  ping: () => Promise<string>,
  watcher: Pick<Watcher, 'isLeader' | 'isReady' | 'leaseProblem'> | undefined,
): Promise<Readiness> {
  const pong = await ping().catch((err: unknown) => (err as Error).message);
  if (pong !== 'PONG') return { ready: false, detail: `Redis does not answer (${pong})` };
  if (!watcher) return { ready: true, detail: 'Redis answers' };
  if (!watcher.isLeader()) {
    // A standby that cannot read the Lease could not take over: say so rather than pass.
    const problem = watcher.leaseProblem();
    if (problem)
      return { ready: false, detail: `standby watcher cannot check the leader Lease: ${problem}` };
    return { ready: true, detail: 'standby watcher (not leading); Redis answers' };
  }
  if (!watcher.isReady())
    return { ready: false, detail: 'leading watcher: informers not synced yet' };
  return { ready: true, detail: 'leading watcher: informers synced; Redis answers' };
}

export interface Running {
  http: HttpServer;
  stop(): Promise<void>;
}

/** Starts the given roles in this process, with one HTTP server for probes, metrics and UIs. */
export async function startRoles(
  roles: readonly Role[],
  config: Config,
  logger = createLogger(config.logLevel),
): Promise<Running> {
  const kc = loadKubeConfig(config.kubeconfig);
  if (config.installCrds) await installCrds(kc, logger);
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });

  const producer = createRedis(config.redisUrl, 'producer');
  producer.on('error', (err) => logger.warn({ err: err.message }, 'redis (producer) error'));
  const recordRequest = kubeRequestCounter(registry);
  const queueMetrics = new QueueMetrics({ registry, depth: () => queue.counts() });
  const queue = new WorkQueue({
    connection: producer,
    metrics: queueMetrics,
    coalesce: config.coalesce,
  });

  let watcher: Watcher | undefined;
  if (roles.includes('watcher')) {
    watcher = new Watcher({
      kc,
      redis: producer,
      queue,
      functions,
      namespace: config.namespace,
      logger: logger.child({ role: 'watcher' }),
      identity: config.identity,
      metrics: registry,
    });
    watcher.start();
  }

  let worker: RunningWorker | undefined;
  let store: ProjectionStore | undefined;
  if (roles.includes('worker')) {
    const storeRedis = createRedis(config.redisUrl, 'worker');
    storeRedis.on('error', (err) => logger.warn({ err: err.message }, 'redis (projections) error'));
    const projections = new ProjectionStore(storeRedis);
    store = projections;
    const webhookCaBundle = config.webhookCaFile
      ? readFileSync(config.webhookCaFile).toString('base64')
      : undefined;
    const handlers: Record<string, Handler> = {};
    for (const fn of functions) {
      handlers[fn.name] = (_key, ctx) => {
        const fctx: FunctionContext = {
          ...ctx,
          store: projections,
          kube: new KubeWriter(kc, ctx.acquireWriteToken, recordRequest),
          config: { namespace: config.namespace, webhookUrl: config.webhookUrl, webhookCaBundle },
          now: () => new Date(),
        };
        return fn.handle(ctx.object.name, fctx);
      };
    }
    worker = await runWorker({
      connection: config.redisUrl,
      handlers,
      concurrency: config.concurrency,
      lockDurationMs: config.jobLockMs,
      rateLimit: { ratePerSecond: config.writeRate, burst: config.writeBurst },
      logger: logger.child({ role: 'worker' }),
      metrics: queueMetrics,
      handleSignals: false,
    });
  }

  const access = {
    credentials: config.uiCredentials,
    localOnly: config.uiLocalOnly,
    readOnly: config.uiReadOnly,
  };
  const pageStore = store ?? new ProjectionStore(producer);
  const http = await startHttpServer({
    port: config.port,
    registry,
    logger,
    ready: () => readiness(() => producer.ping(), watcher),
    extend: (app) => mountUis(app, { access, queue: queue.queue, store: pageStore, logger }),
  });
  logger.info({ roles, port: http.port, namespace: config.namespace }, 'rollcall started');

  return {
    http,
    async stop() {
      // Each step is bounded: a dependency that hangs (a Redis that came back mid-command)
      // must not keep a terminating pod alive until the kubelet's SIGKILL.
      let stuck = false;
      const step = async (what: string, fn: () => Promise<unknown>, ms = 5000) => {
        const started = Date.now();
        const done = await bounded(
          fn().then(() => true),
          ms,
        );
        logger.debug(
          { step: what, ms: Date.now() - started },
          done ? 'stopped' : 'gave up waiting',
        );
        if (!done)
          logger.warn({ step: what, ms }, 'shutdown step did not finish in time; going on');
        stuck ||= !done;
      };
      await step('http', () => http.close());
      await step('watcher', async () => watcher?.stop());
      await step('worker', async () => worker?.close(), 30_000); // includes the jobs' grace period
      await step('queue', () => queue.close());
      for (const redis of [producer, store?.redis])
        await step('redis', async () => redis?.quit().catch(() => redis.disconnect()), 2000);
      // A stuck step may leave a socket holding the event loop open. The timer is unref'd: it
      // fires only if something still keeps the process alive once the caller has returned.
      if (stuck) setTimeout(() => process.exit(process.exitCode ?? 0), 2000).unref();
    },
  };
}
