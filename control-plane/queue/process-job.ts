// One job's run: the handler registered for the key's function, then its outcome turned into
// what BullMQ does next (finish, fail for good, or run again later).

import { DelayedError, UnrecoverableError, type Job } from 'bullmq';
import type { Logger } from 'pino';
import { backoffDelay, type BackoffOptions } from '../../lib/backoff.ts';
import type { RedisClient } from '../../lib/redis/client.ts';
import { parseKey, functionOf, type ParsedKey } from './key.ts';
import { outcomeOfError } from './kube-errors.ts';
import type { QueueMetrics } from './metrics.ts';
import { describeOutcome, done, nextStep, terminal, type Next, type Outcome } from './outcome.ts';
import type { WriteGate, WriteRateLimiter } from './rate-limiter.ts';
import type { JobData, WorkQueue } from './work-queue.ts';

export interface HandlerContext {
  /** The key, parsed. */
  object: ParsedKey;
  /** Logger with function, key, attempt and job id bound. */
  log: Logger;
  /** Consecutive failures of this key before this run (0 normally). */
  failures: number;
  /** Every write to the Kubernetes API goes through it: the shared pause, rate limit and window. */
  writeGate: WriteGate;
  /** True while the API server is slow to take this worker's writes (rate-limiter.ts). */
  writesCongested(): boolean;
  /** Aborted when shutdown's grace period runs out; the job will run again elsewhere. */
  signal: AbortSignal;
}

/** A reconcile function. Returning nothing means done; a thrown error is retryable unless terminal. */
export type Handler = (key: string, ctx: HandlerContext) => Promise<Outcome | void>;

export interface JobProcessorOptions {
  /** Handlers by function name: the part of the key before the first `/`. */
  handlers: Record<string, Handler>;
  /** The worker's command connection (per-key failure counts). */
  commands: RedisClient;
  queue: WorkQueue;
  limiter: WriteRateLimiter;
  logger: Logger;
  /** Per-key backoff after retryable errors. */
  backoff: BackoffOptions;
  metrics?: QueueMetrics | undefined;
  /** Aborted when shutdown's grace period runs out. */
  signal: AbortSignal;
}

/** BullMQ's processor: runs a job's handler and moves the job on according to its outcome. */
export function jobProcessor(
  opts: JobProcessorOptions,
): (job: Job<JobData>, token: string | undefined) => Promise<void> {
  const { commands, queue, limiter, metrics } = opts;

  async function processJob(job: Job<JobData>, token: string | undefined): Promise<void> {
    const key = job.data.key;
    const fn = functionOf(key);
    metrics?.pickedUp(fn, ((job.processedOn ?? Date.now()) - job.timestamp - job.delay) / 1000);
    const failures = Number((await commands.hget(queue.failuresKey, key)) ?? 0);
    const log = opts.logger.child({ function: fn, key, attempt: failures + 1, jobId: job.id });
    const started = performance.now();
    const outcome = await runHandler(key, fn, failures, log);
    metrics?.ran(fn, outcome.kind, (performance.now() - started) / 1000);
    const next = nextStep(outcome, failures, (n) => backoffDelay(n, opts.backoff));
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
      writeGate: (write) => limiter.write(write, opts.signal),
      writesCongested: () => limiter.congested,
      signal: opts.signal,
    };
    try {
      return (await handler(key, ctx)) ?? done();
    } catch (err) {
      return outcomeOfError(err);
    }
  }

  return processJob;
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
