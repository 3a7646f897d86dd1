export { parseKey, formatKey, functionOf, InvalidKeyError, type ParsedKey } from './key.ts';
export {
  done,
  requeueAfter,
  retry,
  terminal,
  TerminalError,
  type Outcome,
  type OutcomeKind,
} from './outcome.ts';
export { backoffDelay, defaultBackoff, type BackoffOptions } from '../../lib/backoff.ts';
export { httpOutcome, outcomeOfError, parseRetryAfter } from './kube-errors.ts';
export {
  WorkQueue,
  type WorkQueueOptions,
  type EnqueueResult,
  type JobData,
  type JobState,
  type RetentionOptions,
} from './work-queue.ts';
export { runWorker, type RunWorkerOptions, type RunningWorker } from './run-worker.ts';
export type { Handler, HandlerContext } from './process-job.ts';
export {
  WriteRateLimiter,
  defaultWriteRateLimit,
  type WriteGate,
  type WriteRateLimitOptions,
} from './rate-limiter.ts';
export { QueueMetrics, type QueueMetricsOptions } from './metrics.ts';
export { createRedis, redisOptions, type RedisRole } from './connection.ts';
export { isReplicated, keyPrefix, type RedisClient } from '../../lib/redis/client.ts';
export { RedisPrimaryTracker, type RedisFailover } from '../../lib/redis/primary.ts';
