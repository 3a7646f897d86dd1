// The worker role: a handler per reconcile function, each run given its FunctionContext (the
// projections, a KubeWriter on the run's write gate, the Event recorder, the shared settings),
// run by the queue's worker.
import { readFileSync } from 'node:fs';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { Config } from './config.ts';
import { EventRecorder } from './functions/event-recorder.ts';
import { KubeWriter, type StatusWritten } from './functions/kube-writer.ts';
import { certificateExpiryGauge } from './functions/policyserver-metrics.ts';
import type { FunctionConfig, FunctionContext, ReconcileFunction } from './functions/types.ts';
import type { KubeObject } from '../api/kube.ts';
import { AuditStore } from './projections/audit-store.ts';
import { compact } from './projections/project.ts';
import { ProjectionStore } from './projections/store.ts';
import type { ApiTarget } from '../lib/kube/api.ts';
import {
  createRedis,
  runWorker,
  type Handler,
  type QueueMetrics,
  type RunningWorker,
  type WorkQueue,
} from './queue/index.ts';
import {
  eventMetrics,
  kubeRequestCounter,
  stageTimer,
  writeWindowGauge,
} from './worker-metrics.ts';

export interface WorkerOptions {
  config: Config;
  functions: readonly ReconcileFunction[];
  /** Where functions enqueue keys (a fan-out, a webhook after its policy). */
  queue: WorkQueue;
  registry: Registry;
  queueMetrics: QueueMetrics;
  logger: Logger;
  /** Told of each run (roles.ts gives the memory a burst freed back to the OS). */
  noteWork(count: number): void;
  /** The apiserver (every function's requests: KubeWriter's, the audit's reads and Reports). */
  api: ApiTarget;
}

export interface StartedWorker {
  worker: RunningWorker;
  /** The projections the functions read, on the worker's own Redis connection. */
  store: ProjectionStore;
}

/** The settings every function shares, from the process's configuration. */
export function functionConfig(config: Config): FunctionConfig {
  return {
    namespace: config.namespace,
    webhookUrl: config.webhookUrl,
    webhookCaBundle: config.webhookCaFile
      ? readFileSync(config.webhookCaFile).toString('base64')
      : undefined,
    protectedNamespaces: config.protectedNamespaces,
    policyServerImage: config.policyServerImage,
    caValidityMs: config.caValidityMs,
    servingCertValidityMs: config.servingCertValidityMs,
    tlsPropagationDelayMs: config.tlsPropagationDelayMs,
    policyServerGuard: config.policyServerGuard,
  };
}

/**
 * What a worker does with a status it wrote: it goes to the projections at once, not only when
 * its watch event comes (store.putWritten says why). Best effort: the event brings it anyway.
 */
export function storeWrittenStatus(store: ProjectionStore, logger: Logger): StatusWritten {
  return async (plural, written, readVersion) => {
    const kind = plural === 'policies' ? 'policy' : 'policyserver';
    await store
      .putWritten(kind, compact(kind, written) as KubeObject, readVersion)
      .catch((err: unknown) => logger.debug({ err }, 'a written status was not stored early'));
  };
}

export async function startWorker(options: WorkerOptions): Promise<StartedWorker> {
  const { config, registry, logger } = options;
  const storeRedis = createRedis(config.redisUrl, 'worker');
  storeRedis.on('error', (err) => logger.warn({ err: err.message }, 'redis (projections) error'));
  const store = new ProjectionStore(storeRedis);
  certificateExpiryGauge(registry, store);
  const shared = {
    store,
    audit: new AuditStore(storeRedis),
    api: options.api,
    config: functionConfig(config),
    enqueue: async (keys: readonly string[]) => void (await options.queue.enqueueMany(keys)),
  };
  const recordRequest = kubeRequestCounter(registry);
  const statusWritten = storeWrittenStatus(store, logger);
  const timedFor = stageTimer(registry);
  const recorder = backgroundEvents(registry, logger.child({ role: 'worker' }));
  const handlers: Record<string, Handler> = {};
  for (const fn of options.functions) {
    const timed = timedFor(fn.name);
    handlers[fn.name] = (_key, ctx) => {
      options.noteWork(1);
      const kube = new KubeWriter(options.api, ctx.writeGate, recordRequest, statusWritten);
      const fctx: FunctionContext = {
        ...ctx,
        ...shared,
        kube,
        events: recorder.of(kube),
        now: () => new Date(),
        timed,
      };
      return fn.handle(ctx.object.name, fctx);
    };
  }
  const worker = await runWorker({
    connection: config.redisUrl,
    handlers,
    concurrency: config.concurrency,
    lockDurationMs: config.jobLockMs,
    rateLimit: { ratePerSecond: config.writeRate, burst: config.writeBurst },
    logger: logger.child({ role: 'worker' }),
    metrics: options.queueMetrics,
    handleSignals: false,
    afterJobs: () => recorder.drain(3000), // inside the pod's 30 s, after the jobs' 25
  });
  writeWindowGauge(registry, worker.limiter.window);
  return { worker, store };
}

/**
 * The worker's background Event writer (functions/event-recorder.ts). Made by the first run,
 * with that run's KubeWriter: the write gate is the process's.
 */
function backgroundEvents(registry: Registry, logger: Logger) {
  let recorder: EventRecorder | undefined;
  const metrics = eventMetrics(registry, () => recorder?.pending ?? 0);
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
          metrics.dropped();
          if (first)
            logger.warn('too many Events to write: dropping new ones until they are written');
        },
      })),
    drain: async (ms: number) => recorder?.drain(ms),
  };
}
