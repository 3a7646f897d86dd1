// The worker runner: takes jobs from the queue, runs the handler registered for the key's
// function (process-job.ts), and shuts down without leaving a job half-moved.

import { Worker, type WorkerOptions } from 'bullmq';
import { pino, type Logger } from 'pino';
import { defaultBackoff, type BackoffOptions } from '../../lib/backoff.ts';
import type { RedisClient } from '../../lib/redis/client.ts';
import { createRedis } from './connection.ts';
import { InflightRuns } from './inflight.ts';
import type { QueueMetrics } from './metrics.ts';
import { jobProcessor, type Handler } from './process-job.ts';
import { WriteRateLimiter, type WriteRateLimitOptions } from './rate-limiter.ts';
import { WorkQueue, type JobData, type RetentionOptions } from './work-queue.ts';

export interface RunWorkerOptions {
  /** Redis URL. */
  connection: string;
  /** Handlers by function name: the part of the key before the first `/`. */
  handlers: Record<string, Handler>;
  /** BullMQ queue name. Default `reconcile`. */
  name?: string;
  /** Redis key prefix. Default `rollcall`. */
  prefix?: string;
  /** Jobs run at once by this process. Default 8. */
  concurrency?: number;
  /** Per-key backoff after retryable errors. */
  backoff?: Partial<BackoffOptions>;
  /** Shared Kubernetes write rate limit. */
  rateLimit?: Partial<WriteRateLimitOptions>;
  /** Default: pino at info level on stdout. */
  logger?: Logger;
  /** Records runs, outcomes, retries and durations. */
  metrics?: QueueMetrics;
  /** Retention of finished jobs (for jobs this worker creates). */
  retention?: Partial<RetentionOptions>;
  /** On shutdown, how long active jobs may take to finish. Default 25 s (inside Kubernetes' 30 s). */
  shutdownGraceMs?: number;
  /**
   * On close, after the last job finished and before the worker's Redis connections close:
   * work the jobs left behind that still needs the write gate (the Events of their runs).
   */
  afterJobs?: () => Promise<unknown>;
  /** Close on SIGTERM/SIGINT, then exit the process. Default true. */
  handleSignals?: boolean;
  /**
   * How long a job's lock lives without renewal. A process that dies mid-job leaves its job
   * locked this long before another worker re-runs it. Default 30 s.
   */
  lockDurationMs?: number;
  /** How often to look for jobs whose lock expired (stalled). Default 15 s. */
  stalledIntervalMs?: number;
  /**
   * How many times a job may stall (its worker died) before BullMQ fails it. Default 5:
   * BullMQ's default of 1 would drop a key's pending run after two crashes.
   */
  maxStalledCount?: number;
}

export interface RunningWorker {
  worker: Worker<JobData>;
  queue: WorkQueue;
  limiter: WriteRateLimiter;
  /** Stops taking jobs, lets active ones finish within the grace period, then closes. */
  close(): Promise<void>;
}

export async function runWorker(opts: RunWorkerOptions): Promise<RunningWorker> {
  const logger = opts.logger ?? pino();
  const commands = createRedis(opts.connection, 'worker');
  const queue = new WorkQueue({
    connection: commands,
    ...(opts.name === undefined ? {} : { name: opts.name }),
    ...(opts.prefix === undefined ? {} : { prefix: opts.prefix }),
    ...(opts.retention === undefined ? {} : { retention: opts.retention }),
  });
  const limiter = new WriteRateLimiter(commands, { ...opts.rateLimit });
  const shutdown = new AbortController();
  const inflight = new InflightRuns();
  const processJob = jobProcessor({
    handlers: opts.handlers,
    commands,
    queue,
    limiter,
    logger,
    backoff: { ...defaultBackoff, ...opts.backoff },
    metrics: opts.metrics,
    signal: shutdown.signal,
  });
  const workerRedis = createRedis(opts.connection, 'worker');
  const worker = new Worker<JobData>(
    queue.name,
    (job, token) => inflight.track(job.id!, processJob(job, token)),
    workerOptions(opts, queue, workerRedis),
  );
  logWorkerEvents(worker, logger, inflight);

  let closing: Promise<void> | undefined;
  const close = (): Promise<void> =>
    (closing ??= (async () => {
      stopSignalHandling();
      await worker.pause(true); // stop taking jobs
      // A job BullMQ had fetched before the pause still starts: wait until none is left.
      if (!(await inflight.allLeft(Date.now() + (opts.shutdownGraceMs ?? 25_000)))) {
        logger.warn(
          { active: inflight.size },
          'shutdown grace period over: active jobs will run again on another worker',
        );
        shutdown.abort();
      }
      // Forced either way: the jobs that finished are all of them (inflight is this worker's
      // own count), and an unforced close also waits out a fetch that is retrying after a
      // Redis error (seen: 30 s right after Redis came back).
      await worker.close(true);
      await opts.afterJobs?.();
      await queue.close();
      for (const redis of [workerRedis, commands])
        await redis.quit().catch(() => redis.disconnect());
    })());
  const stopSignalHandling =
    (opts.handleSignals ?? true) ? closeOnSignals(logger, close) : () => {};

  await worker.waitUntilReady();
  return { worker, queue, limiter, close };
}

function workerOptions(
  opts: RunWorkerOptions,
  queue: WorkQueue,
  connection: RedisClient,
): WorkerOptions {
  const lockDuration = opts.lockDurationMs ?? 30_000;
  return {
    connection,
    prefix: queue.prefix,
    concurrency: opts.concurrency ?? 8,
    lockDuration,
    stalledInterval: opts.stalledIntervalMs ?? Math.max(1000, lockDuration / 2),
    maxStalledCount: opts.maxStalledCount ?? 5,
    removeOnComplete: {
      age: queue.retention.completedAgeSeconds,
      count: queue.retention.completedCount,
    },
    removeOnFail: { count: queue.retention.failedCount },
    // After a Redis error, fetch again in 1 s, not BullMQ's 15 s: a worker picks up work
    // as soon as Redis is back (or a new primary answers).
    runRetryDelay: 1000,
  };
}

/** Logs what BullMQ reports, and tells `inflight` when a job left the active list. */
function logWorkerEvents(worker: Worker<JobData>, logger: Logger, inflight: InflightRuns): void {
  worker.on('error', (err) => logger.error({ err }, 'worker error'));
  worker.on('completed', (job) => inflight.left(job.id));
  worker.on('failed', (job, err) => {
    inflight.left(job?.id);
    logger.warn(
      { function: job?.name, key: job?.data.key, jobId: job?.id, reason: err.message },
      'job failed',
    );
  });
  worker.on('stalled', (jobId) =>
    logger.warn({ jobId }, 'job stalled (its worker died or blocked); it runs again'),
  );
}

/** Closes on SIGTERM/SIGINT, then exits the process; returns what stops listening. */
function closeOnSignals(logger: Logger, close: () => Promise<void>): () => void {
  const onSignal = (signal: NodeJS.Signals) => {
    logger.info({ signal }, 'shutting down');
    void close().then(() => process.exit(0));
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  return () => {
    process.off('SIGTERM', onSignal);
    process.off('SIGINT', onSignal);
  };
}
