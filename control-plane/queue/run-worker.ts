// The worker runner: takes jobs from the queue, runs the handler registered for the key's
// function, and turns its outcome into what BullMQ does next.

import { DelayedError, UnrecoverableError, Worker, type Job } from 'bullmq';
import { pino, type Logger } from 'pino';
import { backoffDelay, defaultBackoff, type BackoffOptions } from '../../lib/backoff.ts';
import { createRedis } from './connection.ts';
import { parseKey, functionOf, type ParsedKey } from './key.ts';
import { outcomeOfError } from './kube-errors.ts';
import type { QueueMetrics } from './metrics.ts';
import { describeOutcome, done, nextStep, terminal, type Next, type Outcome } from './outcome.ts';
import { WriteRateLimiter, type WriteGate, type WriteRateLimitOptions } from './rate-limiter.ts';
import { WorkQueue, type JobData, type RetentionOptions } from './work-queue.ts';

export interface HandlerContext {
  /** The key, parsed. */
  object: ParsedKey;
  /** Logger with function, key, attempt and job id bound. */
  log: Logger;
  /** Consecutive failures of this key before this run (0 normally). */
  failures: number;
  /** Every write to the Kubernetes API goes through it: the shared pause, rate limit and window. */
  writeGate: WriteGate;
  /** Aborted when shutdown's grace period runs out; the job will run again elsewhere. */
  signal: AbortSignal;
}

/** A reconcile function. Returning nothing means done; a thrown error is retryable unless terminal. */
export type Handler = (key: string, ctx: HandlerContext) => Promise<Outcome | void>;

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
  const backoff = { ...defaultBackoff, ...opts.backoff };
  const graceMs = opts.shutdownGraceMs ?? 25_000;
  const lockDuration = opts.lockDurationMs ?? 30_000;
  const commands = createRedis(opts.connection, 'worker');
  const queue = new WorkQueue({
    connection: commands,
    ...(opts.name === undefined ? {} : { name: opts.name }),
    ...(opts.prefix === undefined ? {} : { prefix: opts.prefix }),
    ...(opts.retention === undefined ? {} : { retention: opts.retention }),
  });
  const limiter = new WriteRateLimiter(commands, { ...opts.rateLimit });
  const shutdown = new AbortController();
  // A run is in flight until its job has left BullMQ's active list: BullMQ moves it only after
  // the processor returns, and a forced close before that move skips it, leaving the job active
  // until a stall check re-runs it. BullMQ reports the move as 'completed' or 'failed'; a job
  // moved to delayed left in processJob; a move that fails (Redis away, lock lost) reports
  // nothing, so a finished run waits for it at most a second (then its entry goes too).
  const inflight = new Map<string, { left: Promise<void>; leave(): void }>();
  function track(id: string, run: Promise<void>): void {
    const { promise, resolve } = Promise.withResolvers<void>();
    const entry = {
      left: promise,
      leave() {
        resolve();
        if (inflight.get(id) === entry) inflight.delete(id);
      },
    };
    inflight.set(id, entry);
    const waitForMove = () => setTimeout(entry.leave, 1000).unref();
    run.then(waitForMove, (err: unknown) =>
      err instanceof DelayedError ? entry.leave() : waitForMove(),
    );
  }
  const leftActive = (id: string | undefined) => id !== undefined && inflight.get(id)?.leave();

  async function processJob(job: Job<JobData>, token: string | undefined): Promise<void> {
    const key = job.data.key;
    const fn = functionOf(key);
    opts.metrics?.pickedUp(
      fn,
      ((job.processedOn ?? Date.now()) - job.timestamp - job.delay) / 1000,
    );
    const failures = Number((await commands.hget(queue.failuresKey, key)) ?? 0);
    const log = logger.child({ function: fn, key, attempt: failures + 1, jobId: job.id });
    const started = performance.now();
    const outcome = await runHandler(key, fn, failures, log);
    opts.metrics?.ran(fn, outcome.kind, (performance.now() - started) / 1000);
    const next = nextStep(outcome, failures, (n) => backoffDelay(n, backoff));
    logOutcome(log, outcome, next);

    // A count read as 0 has no field to delete: one round trip less for almost every run.
    if (next.failures === 0) {
      if (failures > 0) await commands.hdel(queue.failuresKey, key);
    } else await commands.hset(queue.failuresKey, key, next.failures);
    if (outcome.kind === 'throttled') await limiter.pause(outcome.delayMs);

    if (next.type === 'finish') return;
    if (next.type === 'fail') throw new UnrecoverableError(next.reason);
    // Run again later. If an add arrived during this run, BullMQ holds a successor that
    // only starts when this job finishes: finish now so the fresh event is not delayed.
    if (await queue.successorPending(key)) return;
    const data: JobData =
      outcome.kind === 'retry'
        ? { key, lastError: outcome.error.message, failures: next.failures }
        : { key };
    await job.updateData(data);
    await job.moveToDelayed(Date.now() + next.delayMs, token);
    // An add between the check above and the move found the job active and became a
    // successor: run now instead (a fresh add after the move reschedules it by itself).
    if (await queue.successorPending(key)) await job.promote().catch(() => {});
    throw new DelayedError();
  }

  async function runHandler(
    key: string,
    fn: string,
    failures: number,
    log: Logger,
  ): Promise<Outcome> {
    const handler = opts.handlers[fn];
    if (!handler) return terminal(`no handler for function ${JSON.stringify(fn)}`);
    let object: ParsedKey;
    try {
      object = parseKey(key);
    } catch (err) {
      return terminal((err as Error).message);
    }
    const ctx: HandlerContext = {
      object,
      log,
      failures,
      writeGate: (write) => limiter.write(write, shutdown.signal),
      signal: shutdown.signal,
    };
    try {
      return (await handler(key, ctx)) ?? done();
    } catch (err) {
      return outcomeOfError(err);
    }
  }

  const workerRedis = createRedis(opts.connection, 'worker');
  const worker = new Worker<JobData>(
    queue.name,
    (job, token) => {
      const run = processJob(job, token);
      track(job.id!, run);
      return run;
    },
    {
      connection: workerRedis,
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
    },
  );
  worker.on('error', (err) => logger.error({ err }, 'worker error'));
  worker.on('completed', (job) => leftActive(job.id));
  worker.on('failed', (job, err) => {
    leftActive(job?.id);
    logger.warn(
      { function: job?.name, key: job?.data.key, jobId: job?.id, reason: err.message },
      'job failed',
    );
  });
  worker.on('stalled', (jobId) =>
    logger.warn({ jobId }, 'job stalled (its worker died or blocked); it runs again'),
  );

  let closing: Promise<void> | undefined;
  const close = (): Promise<void> =>
    (closing ??= (async () => {
      removeSignalHandlers();
      await worker.pause(true); // stop taking jobs
      // A job BullMQ had fetched before the pause still starts: wait until none is left.
      const deadline = Date.now() + graceMs;
      let finished = true;
      while (finished && inflight.size > 0)
        finished = await Promise.race([
          Promise.all([...inflight.values()].map((run) => run.left)).then(() => true),
          new Promise<false>((resolve) =>
            setTimeout(resolve, deadline - Date.now(), false).unref(),
          ),
        ]);
      if (!finished) {
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

  const onSignal = (signal: NodeJS.Signals) => {
    logger.info({ signal }, 'shutting down');
    void close().then(() => process.exit(0));
  };
  const removeSignalHandlers = () => {
    process.off('SIGTERM', onSignal);
    process.off('SIGINT', onSignal);
  };
  if (opts.handleSignals ?? true) {
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
  }

  await worker.waitUntilReady();
  return { worker, queue, limiter, close };
}

function logOutcome(log: Logger, outcome: Outcome, next: Next): void {
  const fields = {
    outcome: outcome.kind,
    ...(next.type === 'rerun' ? { delayMs: next.delayMs, failures: next.failures } : {}),
  };
  if (outcome.kind === 'retry') log.warn({ ...fields, err: outcome.error }, 'run failed, retrying');
  else if (outcome.kind === 'terminal') log.error(fields, `run failed for good: ${outcome.reason}`);
  else log.debug(fields, describeOutcome(outcome));
}
