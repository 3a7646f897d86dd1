// The producer side: enqueue(key) with controller-runtime workqueue semantics on BullMQ.
//
// Coalescing relies on BullMQ deduplication with the key as id (verified in
// test/integration/queue/bullmq-dedup.test.ts; see control-plane/queue/README.md):
// - waiting/delayed job for the key → the add joins it (a key waits at most once);
//   `reschedule` pulls a delayed job (requeueAfter, backoff, Retry-After) forward to now,
//   so a fresh event never waits out a delay meant for an older state;
// - active job → BullMQ stores one successor (`keepLastIfActive`) and creates it when the
//   active job finishes (runs once more afterwards, never concurrently).

import { randomUUID } from 'node:crypto';
import { Queue, type JobsOptions } from 'bullmq';
import { createRedis } from './connection.ts';
import { keyPrefix, type RedisClient } from '../../lib/redis/client.ts';
import { newJobId, parseKey } from './key.ts';
import type { QueueMetrics } from './metrics.ts';

export interface RetentionOptions {
  /** Completed jobs are deleted after this many seconds. Default 3600. */
  completedAgeSeconds: number;
  /** At most this many completed jobs are kept. Default 1000. */
  completedCount: number;
  /** At most this many failed (terminal) jobs are kept for inspection. Default 1000. */
  failedCount: number;
}

const defaultRetention: RetentionOptions = {
  completedAgeSeconds: 3600,
  completedCount: 1000,
  failedCount: 1000,
};

export interface WorkQueueOptions {
  /** Redis URL (a connection is created and closed with the queue) or a client to share. */
  connection: string | RedisClient;
  /** BullMQ queue name. Default `reconcile`. */
  name?: string;
  /** Redis key prefix; give each test its own. Default `rollcall` (a hash tag on a Cluster: keyPrefix). */
  prefix?: string;
  /**
   * Coalesce adds per key. Default true. `false` makes plain BullMQ adds: the benchmark's
   * baseline, and the mode in which the tests must see violations.
   */
  coalesce?: boolean;
  /** Bounds on finished jobs kept in Redis. */
  retention?: Partial<RetentionOptions>;
  /** Counts adds and coalesced adds. */
  metrics?: QueueMetrics;
}

/** The data of every job: only the key. Handlers re-read current state. */
export interface JobData {
  key: string;
  /** Last retryable error, shown in Bull Board while the job waits for its retry. */
  lastError?: string;
  /** Consecutive failures of the key when the job was delayed. */
  failures?: number;
}

export interface EnqueueResult {
  /** Id of the job that will run the key. */
  jobId: string;
  /** True when the add joined a pending job (or became the active job's successor). */
  coalesced: boolean;
}

export const jobStates = [
  'waiting',
  'active',
  'delayed',
  'prioritized',
  'completed',
  'failed',
] as const;
export type JobState = (typeof jobStates)[number];

const defaultQueueName = 'reconcile';
/** Keys per pipelined bulk add. */
const enqueueBatch = 500;
const defaultPrefix = 'rollcall';

export class WorkQueue {
  readonly queue: Queue<JobData>;
  readonly name: string;
  readonly prefix: string;
  readonly coalesce: boolean;
  readonly retention: RetentionOptions;
  readonly redis: RedisClient;
  private readonly ownsConnection: boolean;
  private readonly metrics: QueueMetrics | undefined;

  constructor(opts: WorkQueueOptions) {
    this.name = opts.name ?? defaultQueueName;
    this.coalesce = opts.coalesce ?? true;
    this.retention = { ...defaultRetention, ...opts.retention };
    this.metrics = opts.metrics;
    this.ownsConnection = typeof opts.connection === 'string';
    this.redis =
      typeof opts.connection === 'string'
        ? createRedis(opts.connection, 'producer')
        : opts.connection;
    this.prefix = keyPrefix(this.redis, opts.prefix ?? defaultPrefix);
    this.queue = new Queue<JobData>(this.name, {
      connection: this.redis,
      prefix: this.prefix,
      defaultJobOptions: this.jobOptions(),
    });
  }

  /** Options every job gets. Attempts/backoff here only cover failures of the queue shell itself. */
  private jobOptions(): JobsOptions {
    return {
      attempts: 5,
      backoff: { type: 'exponential', delay: 1000 },
      removeOnComplete: {
        age: this.retention.completedAgeSeconds,
        count: this.retention.completedCount,
      },
      removeOnFail: { count: this.retention.failedCount },
    };
  }

  /** Asks for one more run of `key` (`<function>/<name>` or `<function>/<namespace>/<name>`). */
  async enqueue(key: string): Promise<EnqueueResult> {
    const [result] = await this.enqueueMany([key]);
    return result!;
  }

  /**
   * `enqueue` for many keys, pipelined: one round trip per `enqueueBatch` keys (BullMQ's
   * addBulk, each add the same deduplicating script).
   */
  async enqueueMany(keys: readonly string[]): Promise<EnqueueResult[]> {
    const results: EnqueueResult[] = [];
    for (let i = 0; i < keys.length; i += enqueueBatch) {
      const adds = keys.slice(i, i + enqueueBatch).map((key) => {
        const jobId = newJobId(key, randomUUID());
        const opts: JobsOptions = this.coalesce
          ? { jobId, deduplication: { id: key, keepLastIfActive: true, reschedule: true } }
          : { jobId };
        return { name: parseKey(key).function, data: { key }, opts };
      });
      const jobs = await this.queue.addBulk(adds);
      adds.forEach((add, j) => {
        // BullMQ returns the existing job's id when it deduplicated the add.
        const id = jobs[j]?.id ?? add.opts.jobId!;
        const coalesced = id !== add.opts.jobId;
        this.metrics?.enqueued(add.name, coalesced);
        results.push({ jobId: id, coalesced });
      });
    }
    return results;
  }

  /** Jobs per state (for metrics and drain checks). */
  async counts(): Promise<Record<JobState, number>> {
    const counts = await this.queue.getJobCounts(...jobStates);
    return Object.fromEntries(jobStates.map((s) => [s, counts[s] ?? 0])) as Record<
      JobState,
      number
    >;
  }

  /** Keys not yet run to an end: waiting, active, delayed or prioritized jobs. */
  async pending(): Promise<number> {
    const c = await this.counts();
    return c.waiting + c.active + c.delayed + c.prioritized;
  }

  /**
   * True when an add arrived while the key's job was active, i.e. BullMQ holds a successor
   * (`<prefix>:<queue>:dn:<key>`, an internal key of BullMQ 6.7's keepLastIfActive,
   * pinned by test/integration/queue/bullmq-dedup.test.ts).
   */
  async successorPending(key: string): Promise<boolean> {
    return (await this.redis.exists(this.queue.toKey(`dn:${key}`))) === 1;
  }

  /** Redis hash of consecutive failures per key (reset by done, requeueAfter and terminal). */
  get failuresKey(): string {
    return this.queue.toKey('rollcall-failures');
  }

  async close(): Promise<void> {
    await this.queue.close();
    if (this.ownsConnection) await this.redis.quit().catch(() => this.redis.disconnect());
  }
}
