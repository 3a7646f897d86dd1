// Helpers for the queue's integration tests: a queue and an in-process worker on a prefix
// of their own, and a recorder of runs.

import { pino } from 'pino';
import type { Handler, HandlerContext } from '../../../control-plane/queue/process-job.ts';
import {
  runWorker,
  type RunningWorker,
  type RunWorkerOptions,
} from '../../../control-plane/queue/run-worker.ts';
import { WorkQueue, type WorkQueueOptions } from '../../../control-plane/queue/work-queue.ts';
import { redisUrl, uniquePrefix } from '../../support/redis.ts';

export const silent = pino({ level: 'silent' });

export interface Run {
  key: string;
  at: number;
  failures: number;
}

export interface Harness {
  queue: WorkQueue;
  worker: RunningWorker;
  runs: Run[];
  close(): Promise<void>;
}

/** One queue and one worker whose `test` handler records every run and then calls `handle`. */
export async function startHarness(
  name: string,
  handle: (key: string, ctx: HandlerContext, runs: Run[]) => ReturnType<Handler>,
  opts: Partial<RunWorkerOptions> & { queue?: Partial<WorkQueueOptions> } = {},
): Promise<Harness> {
  const prefix = uniquePrefix(name);
  const runs: Run[] = [];
  const { queue: queueOpts, ...workerOpts } = opts;
  const queue = new WorkQueue({ connection: redisUrl(), prefix, ...queueOpts });
  const worker = await runWorker({
    connection: redisUrl(),
    prefix,
    logger: silent,
    handleSignals: false,
    handlers: {
      test: (key, ctx) => {
        runs.push({ key, at: Date.now(), failures: ctx.failures });
        return handle(key, ctx, runs);
      },
    },
    ...workerOpts,
  });
  return {
    queue,
    worker,
    runs,
    async close() {
      await worker.close();
      await queue.queue.obliterate({ force: true }).catch(() => {});
      await queue.close();
    },
  };
}

/** Runs `body` with a harness that is closed afterwards, also when `body` fails. */
export async function withHarness(
  name: string,
  handle: Parameters<typeof startHarness>[1],
  opts: Parameters<typeof startHarness>[2],
  body: (h: Harness) => Promise<void>,
): Promise<void> {
  const h = await startHarness(name, handle, opts);
  try {
    await body(h);
  } finally {
    await h.close();
  }
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
