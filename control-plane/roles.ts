// The roles rollcall runs as: watcher, worker, or both in one process (`rollcall run`).
// Each is a thin shell wiring the pure functions to Kubernetes, Redis and HTTP.
import { readFileSync } from 'node:fs';
import type { Logger } from 'pino';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { EventRecorder } from './functions/event-recorder.ts';
import { functions } from './functions/index.ts';
import type { KubeWriter } from './functions/kube-writer.ts';
import { certificateExpiryGauge } from './functions/policyserver-metrics.ts';
import { errorText } from '../lib/kube/errors.ts';
import type { FunctionContext } from './functions/types.ts';
import { loadApiTarget } from '../lib/kube/api.ts';
import { ProjectionStore } from './projections/store.ts';
import {
  createRedis,
  isReplicated,
  QueueMetrics,
  RedisPrimaryTracker,
  runWorker,
  WorkQueue,
  type Handler,
  type RunningWorker,
} from './queue/index.ts';
import { startHttpServer, type HttpServer, type Readiness } from './http/http.ts';
import { mountUis } from './http/ui.ts';
import { Watcher } from './watcher/watcher.ts';
import type { Config } from './config.ts';
import { createLogger } from '../lib/logger.ts';
import { releaseAfterBursts } from '../lib/release-memory.ts';

export type Role = 'watcher' | 'worker';

/** Counts Kubernetes API writes by verb and HTTP status code (0: no response). */
function kubeRequestCounter(registry: Registry): (verb: string, code: number) => void {
  const counter = new Counter({
    name: 'rollcall_kube_requests_total',
    help: 'Kubernetes API write requests made by worker functions, by verb and HTTP status code (0: no response)',
    labelNames: ['verb', 'code'],
    registers: [registry],
  });
  return (verb, code) => counter.inc({ verb, code: String(code) });
}

/** Times the stages of function runs (read, compute, write), for the latency breakdown. */
function stageTimer(registry: Registry): (fn: string) => FunctionContext['timed'] {
  const histogram = new Histogram({
    name: 'rollcall_function_stage_seconds',
    help: 'Time a function run spends reading projections, computing, and writing to the API',
    labelNames: ['function', 'stage'],
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1],
    registers: [registry],
  });
  return (fn) => async (stage, run) => {
    const end = histogram.startTimer({ function: fn, stage });
    try {
      return await run();
    } finally {
      end();
    }
  };
}

/**
 * The worker's background Event writer (control-plane/functions/event-recorder.ts), its backlog and drops on
 * /metrics. Made by the first run, with that run's KubeWriter: the write gate is the process's.
 */
function backgroundEvents(registry: Registry, logger: Logger) {
  let recorder: EventRecorder | undefined;
  const dropped = new Counter({
    name: 'rollcall_events_dropped_total',
    help: 'Policy Events dropped because the backlog of Events to write was full',
    registers: [registry],
  });
  new Gauge({
    name: 'rollcall_events_pending',
    help: 'Policy Events waiting to be written or being written',
    registers: [registry],
    collect() {
      this.set(recorder?.pending ?? 0);
    },
  });
  return {
    of: (kube: KubeWriter): EventRecorder =>
      (recorder ??= new EventRecorder({
        write: ({ regarding, event, at }) => kube.event(regarding, event, at),
        failed: ({ regarding, event }, err) =>
          logger.warn(
            { err, regarding: regarding.name, reason: event.reason },
            'could not write Event',
          ),
        dropped: (_, first) => {
          dropped.inc();
          if (first)
            logger.warn('too many Events to write: dropping new ones until they are written');
        },
      })),
    drain: async (ms: number) => recorder?.drain(ms),
  };
}

/** client-node's KubeConfig (one, shared by every user in the process) and what writes with it. */
async function loadClientNode(kubeconfig: string | undefined) {
  const [{ loadKubeConfig }, { KubeWriter }, { installCrds }] = await Promise.all([
    import('../lib/kube/kube-config.ts'),
    import('./functions/kube-writer.ts'),
    import('./install-crds.ts'),
  ]);
  return { kc: loadKubeConfig(kubeconfig), KubeWriter, installCrds };
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
  // client-node (its generated API and undici, ~30 MiB resident) is loaded only by the roles
  // that write through it: a watcher reads with lib/kube/api.ts alone.
  let loaded: ReturnType<typeof loadClientNode> | undefined;
  const clientNode = () => (loaded ??= loadClientNode(config.kubeconfig));
  if (config.installCrds) {
    const { kc, installCrds } = await clientNode();
    await installCrds(kc, logger);
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
  const recordRequest = kubeRequestCounter(registry);
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
  if (roles.includes('watcher')) {
    watcher = new Watcher({
      api: await loadApiTarget(config.kubeconfig),
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

  let worker: RunningWorker | undefined;
  let store: ProjectionStore | undefined;
  if (roles.includes('worker')) {
    const { kc, KubeWriter } = await clientNode();
    const storeRedis = createRedis(config.redisUrl, 'worker');
    storeRedis.on('error', (err) => logger.warn({ err: err.message }, 'redis (projections) error'));
    const projections = new ProjectionStore(storeRedis);
    store = projections;
    certificateExpiryGauge(registry, projections);
    const webhookCaBundle = config.webhookCaFile
      ? readFileSync(config.webhookCaFile).toString('base64')
      : undefined;
    const handlers: Record<string, Handler> = {};
    const timedFor = stageTimer(registry);
    const recorder = backgroundEvents(registry, logger.child({ role: 'worker' }));
    for (const fn of functions) {
      const timed = timedFor(fn.name);
      handlers[fn.name] = (_key, ctx) => {
        memory.noteWork(1);
        const kube = new KubeWriter(kc, ctx.writeGate, recordRequest);
        const fctx: FunctionContext = {
          ...ctx,
          store: projections,
          kube,
          events: recorder.of(kube),
          config: {
            namespace: config.namespace,
            webhookUrl: config.webhookUrl,
            webhookCaBundle,
            protectedNamespaces: config.protectedNamespaces,
            policyServerImage: config.policyServerImage,
            caValidityMs: config.caValidityMs,
            servingCertValidityMs: config.servingCertValidityMs,
            tlsPropagationDelayMs: config.tlsPropagationDelayMs,
          },
          now: () => new Date(),
          enqueue: async (keys) => void (await queue.enqueueMany(keys)),
          timed,
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
      afterJobs: () => recorder.drain(3000), // inside the pod's 30 s, after the jobs' 25
    });
    const window = worker.limiter.window;
    new Gauge({
      name: 'rollcall_kube_write_window',
      help: 'Writes to the Kubernetes API this worker sends at once, narrowed by 429s (+Inf: no limit)',
      registers: [registry],
      collect() {
        this.set(window.size);
      },
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
    ready: () => readiness(() => producer.ping(), watcher, primary && (() => primary.describe())),
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
      primary?.stop();
      memory.stop();
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
