import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Registry } from 'prom-client';
import { QueueMetrics } from '../../../control-plane/queue/metrics.ts';
import { requeueAfter } from '../../../control-plane/queue/outcome.ts';
import { runWorker } from '../../../control-plane/queue/run-worker.ts';
import { WorkQueue } from '../../../control-plane/queue/work-queue.ts';
import { redisUrl, uniquePrefix } from '../../support/redis.ts';
import { silent, sleep, startHarness, withHarness } from './harness.ts';
import { eventually } from '../../support/poll.ts';

test('shutdown stops taking jobs and lets the active one finish', async () => {
  let finished = 0;
  await withHarness(
    'graceful',
    async () => {
      await sleep(300);
      finished++;
    },
    {},
    async (h) => {
      await h.queue.enqueue('test/a');
      await h.queue.enqueue('test/b');
      await eventually('a run', () => h.runs.length >= 1);
      await h.worker.close();
      assert.equal(finished, h.runs.length, 'every started run finished');
      assert.equal((await h.queue.counts()).active, 0);
    },
  );
});

test('after the grace period, shutdown aborts the handler and another worker re-runs the job', async () => {
  const h = await startHarness(
    'grace',
    async (_key, ctx, runs) => {
      if (runs.length === 1)
        await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve));
    },
    { shutdownGraceMs: 100, lockDurationMs: 500, stalledIntervalMs: 250 },
  );
  let second: Awaited<ReturnType<typeof runWorker>> | undefined;
  try {
    await h.queue.enqueue('test/a');
    await eventually('first run', () => h.runs.length === 1);
    const started = Date.now();
    await h.worker.close();
    assert.ok(Date.now() - started < 1000, 'close did not wait for the stuck run');
    const reruns: string[] = [];
    second = await runWorker({
      connection: redisUrl(),
      prefix: h.queue.prefix,
      logger: silent,
      handleSignals: false,
      lockDurationMs: 500,
      stalledIntervalMs: 250,
      handlers: { test: async (key) => void reruns.push(key) },
    });
    await eventually('re-run elsewhere', () => reruns.length === 1, 5000);
  } finally {
    await second?.close();
    await h.close();
  }
});

test('metrics count adds, coalesced adds, runs by outcome, retries, durations and depth', async () => {
  const registry = new Registry();
  const prefix = uniquePrefix('metrics');
  let queue: WorkQueue | undefined;
  const metrics = new QueueMetrics({ registry, depth: () => queue!.counts() });
  queue = new WorkQueue({ connection: redisUrl(), prefix, metrics });
  let runs = 0;
  const worker = await runWorker({
    connection: redisUrl(),
    prefix,
    logger: silent,
    handleSignals: false,
    metrics,
    backoff: { baseMs: 10, capMs: 10, jitter: 0 },
    handlers: {
      test: async () => {
        runs++;
        await sleep(100);
        if (runs === 1) throw new Error('once');
        if (runs === 2) return requeueAfter(10);
      },
    },
  });
  try {
    await Promise.all([1, 2, 3, 4].map(() => queue!.enqueue('test/a')));
    await eventually('runs', async () => runs >= 3 && (await queue!.pending()) === 0, 5000);
    const text = await registry.metrics();
    const value = (line: string) =>
      Number(
        text
          .split('\n')
          .find((l) => l.startsWith(line))
          ?.split(' ')
          .at(-1),
      );
    assert.equal(value('rollcall_queue_adds_total{function="test"}'), 4);
    assert.equal(value('rollcall_queue_coalesced_adds_total{function="test"}'), 3);
    assert.equal(value('rollcall_queue_runs_total{function="test",outcome="retry"}'), 1);
    assert.equal(value('rollcall_queue_runs_total{function="test",outcome="requeueAfter"}'), 1);
    assert.equal(value('rollcall_queue_runs_total{function="test",outcome="done"}'), 1);
    assert.equal(value('rollcall_queue_retries_total{function="test"}'), 1);
    assert.equal(value('rollcall_queue_run_duration_seconds_count{function="test"}'), 3);
    assert.equal(value('rollcall_queue_depth{state="completed"}'), 1);
    assert.equal(value('rollcall_queue_depth{state="waiting"}'), 0);
  } finally {
    await worker.close();
    await queue.queue.obliterate({ force: true });
    await queue.close();
  }
});
