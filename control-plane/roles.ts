// The roles rollcall runs as: watcher, worker, or both in one process (`rollcall run`).
// Each is a thin shell wiring the pure functions to Kubernetes, Redis and HTTP; the worker's
// handlers and their context are worker.ts's.
import type { Logger } from 'pino';
import { Registry, collectDefaultMetrics } from 'prom-client';
import { functions } from './functions/index.ts';
import { errorText } from '../lib/kube/errors.ts';
import { loadApiTarget } from '../lib/kube/api.ts';
import { ProjectionStore } from './projections/store.ts';
import {
  createRedis,
  isReplicated,
  QueueMetrics,
  RedisPrimaryTracker,
  WorkQueue,
  type RedisClient,
} from './queue/index.ts';
import { startHttpServer, type HttpServer, type Readiness } from './http/http.ts';
import { mountUis } from './http/ui.ts';
import { Watcher } from './watcher/watcher.ts';
import { startWorker, type StartedWorker } from './worker.ts';
import type { Config } from './config.ts';
import { createLogger } from '../lib/logger.ts';
import { releaseAfterBursts } from '../lib/release-memory.ts';

export type Role = 'watcher' | 'worker';

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

/**
 * /readyz for the given roles: Redis answers, and a leading watcher has synced its informers.
 * `redis` (Sentinel, Cluster) adds which node is primary and the last failover to the detail.
 */
export async function readiness(
  ping: () => Promise<string>,
  watcher: Pick<Watcher, 'isLeader' | 'isReady' | 'leaseProblem'> | undefined,
  redis?: () => string,
): Promise<Readiness> {
  const r = await readinessOf(ping, watcher);
  return redis ? { ...r, detail: `${r.detail} (Redis ${redis()})` } : r;
}

async function readinessOf(
  ping: () => Promise<string>,
  watcher: Pick<Watcher, 'isLeader' | 'isReady' | 'leaseProblem'> | undefined,
): Promise<Readiness> {
  const pong = await ping().catch(errorText);
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
  // client-node (its generated API and undici, 78 MiB resident) is loaded only to install
  // the CRDs: the roles read and write with lib/kube/api.ts alone.
  if (config.installCrds) {
    const [{ loadKubeConfig }, { installCrds }] = await Promise.all([
      import('../lib/kube/kube-config.ts'),
      import('./install-crds.ts'),
    ]);
    await installCrds(loadKubeConfig(config.kubeconfig), logger);
  }
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });

  const producer = createRedis(config.redisUrl, 'producer');
  producer.on('error', (err) => logger.warn({ err: err.message }, 'redis (producer) error'));
  // Sentinel and Cluster: which node is primary for rollcall's keys, and failovers (/readyz, metrics).
  const primary = isReplicated(producer)
    ? new RedisPrimaryTracker(producer, new ProjectionStore(producer).syncedKey, {
        registry,
        onFailover: ({ from, to }) => logger.warn({ from, to }, 'Redis primary changed (failover)'),
      })
    : undefined;
  const queueMetrics = new QueueMetrics({ registry, depth: () => queue.counts() });
  const queue = new WorkQueue({
    connection: producer,
    metrics: queueMetrics,
    coalesce: config.coalesce,
  });

  let watcher: Watcher | undefined;
  const memory = releaseAfterBursts({
    released: (ms) => logger.debug({ ms }, 'freed heap pages returned to the OS'),
  });
  // The watcher's and the worker's apiserver (a UI-only process needs none).
  const api =
    roles.includes('watcher') || roles.includes('worker')
      ? await loadApiTarget(config.kubeconfig)
      : undefined;
  if (api && roles.includes('watcher')) {
    watcher = new Watcher({
      api,
      queue,
      functions,
      namespace: config.namespace,
      logger: logger.child({ role: 'watcher' }),
      identity: config.identity,
      metrics: registry,
      noteWork: memory.noteWork,
    });
    watcher.start();
  }

  let worker: StartedWorker | undefined;
  if (api && roles.includes('worker')) {
    worker = await startWorker({
      config,
      functions,
      queue,
      registry,
      queueMetrics,
      logger,
      noteWork: memory.noteWork,
      api,
    });
  }

  const access = {
    credentials: config.uiCredentials,
    localOnly: config.uiLocalOnly,
    readOnly: config.uiReadOnly,
  };
  const pageStore = worker?.store ?? new ProjectionStore(producer);
  const http = await startHttpServer({
    port: config.port,
    registry,
    logger,
    ready: () => readiness(() => producer.ping(), watcher, primary && (() => primary.describe())),
    extend: (app) => mountUis(app, { access, queue: queue.queue, store: pageStore, logger }),
  });
  logger.info({ roles, port: http.port, namespace: config.namespace }, 'rollcall started');

  return {
    http,
    async stop() {
      primary?.stop();
      memory.stop();
      await stopInOrder(logger, [
        ['http', () => http.close()],
        ['watcher', async () => watcher?.stop()],
        ['worker', async () => worker?.worker.close(), 30_000], // includes the jobs' grace period
        ['queue', () => queue.close()],
        ...[producer, worker?.store.redis].map((redis): Step => ['redis', quit(redis), 2000]),
      ]);
    },
  };
}

/** A shutdown step: what it stops, how, and how long it may take (default 5 s). */
type Step = [what: string, stop: () => Promise<unknown>, ms?: number];

const quit = (redis: RedisClient | undefined) => async () =>
  redis?.quit().catch(() => redis.disconnect());

/**
 * Runs the steps one after the other, each bounded: a dependency that hangs (a Redis that came
 * back mid-command) must not keep a terminating pod alive until the kubelet's SIGKILL.
 */
async function stopInOrder(logger: Logger, steps: readonly Step[]): Promise<void> {
  let stuck = false;
  for (const [what, stop, ms = 5000] of steps) {
    const started = Date.now();
    const done = await bounded(
      stop().then(() => true),
      ms,
    );
    logger.debug({ step: what, ms: Date.now() - started }, done ? 'stopped' : 'gave up waiting');
    if (!done) logger.warn({ step: what, ms }, 'shutdown step did not finish in time; going on');
    stuck ||= !done;
  }
  // A stuck step may leave a socket holding the event loop open. The timer is unref'd: it
  // fires only if something still keeps the process alive once the caller has returned.
  if (stuck) setTimeout(() => process.exit(process.exitCode ?? 0), 2000).unref();
}
