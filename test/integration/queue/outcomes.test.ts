import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ApiException } from '@kubernetes/client-node';
import {
  done,
  requeueAfter,
  terminal,
  TerminalError,
} from '../../../control-plane/queue/outcome.ts';
import { sleep, withHarness } from './harness.ts';
import { eventually } from '../../support/poll.ts';

const gaps = (times: number[]) => times.slice(1).map((t, i) => t - times[i]!);

test('a done run forgets the key and a later enqueue runs it again', async () => {
  await withHarness(
    'done',
    async () => done(),
    {},
    async (h) => {
      await h.queue.enqueue('test/a');
      await eventually('first run', () => h.runs.length === 1);
      await eventually('job completed', async () => (await h.queue.counts()).completed === 1);
      await h.queue.enqueue('test/a');
      await eventually('second run', () => h.runs.length === 2);
      assert.equal(await h.queue.redis.hget(h.queue.failuresKey, 'test/a'), null);
    },
  );
});

test('an enqueue while the key runs makes exactly one more run after it, never a concurrent one', async () => {
  let active = 0;
  let maxActive = 0;
  await withHarness(
    'dirty',
    async () => {
      active++;
      maxActive = Math.max(maxActive, active);
      await sleep(200);
      active--;
    },
    {},
    async (h) => {
      await h.queue.enqueue('test/a');
      await eventually('first run', () => h.runs.length === 1);
      const adds = await Promise.all([1, 2, 3, 4, 5].map(() => h.queue.enqueue('test/a')));
      assert.ok(
        adds.every((a) => a.coalesced),
        'adds during a run coalesce into one successor',
      );
      await eventually('drained', async () => (await h.queue.pending()) === 0 && active === 0);
      await sleep(200);
      assert.equal(h.runs.length, 2);
      assert.equal(maxActive, 1);
    },
  );
});

test('requeueAfter runs the key again after the delay, and a fresh enqueue pulls that run forward', async () => {
  await withHarness(
    'requeue',
    async (_key, _ctx, runs) =>
      runs.length === 1 ? requeueAfter(300) : runs.length === 3 ? requeueAfter(60_000) : done(),
    {},
    async (h) => {
      await h.queue.enqueue('test/a');
      await eventually('requeued run', () => h.runs.length === 2);
      const [first, second] = h.runs;
      assert.ok(
        second!.at - first!.at >= 290,
        `second run ${second!.at - first!.at} ms after the first`,
      );
      assert.ok(second!.at - first!.at < 1500);

      // Third run asks for a run in a minute; an event arrives meanwhile: it must not wait.
      await h.queue.enqueue('test/a');
      await eventually('third run', () => h.runs.length === 3);
      await eventually('delayed', async () => (await h.queue.counts()).delayed === 1);
      const { coalesced } = await h.queue.enqueue('test/a');
      assert.equal(coalesced, true, 'the event joins the delayed job');
      await eventually('fourth run', () => h.runs.length === 4, 2000);
      assert.ok(h.runs[3]!.at - h.runs[2]!.at < 1500);
      await eventually('drained', async () => (await h.queue.pending()) === 0);
    },
  );
});

test('retryable errors back off exponentially per key up to the cap, and success resets the backoff', async () => {
  const failTimes = 7;
  await withHarness(
    'backoff',
    async (_key, _ctx, runs) => {
      if (runs.length <= failTimes) throw new Error(`boom ${runs.length}`);
    },
    { backoff: { baseMs: 50, capMs: 400, jitter: 0 } },
    async (h) => {
      await h.queue.enqueue('test/a');
      await eventually(
        'all retries and the success',
        () => h.runs.length === failTimes + 1,
        15_000,
      );
      assert.deepEqual(
        h.runs.map((r) => r.failures),
        [0, 1, 2, 3, 4, 5, 6, 7],
      );
      const expected = [50, 100, 200, 400, 400, 400, 400];
      const actual = gaps(h.runs.map((r) => r.at));
      actual.forEach((gap, i) => {
        assert.ok(gap >= expected[i]! - 5, `gap ${i} was ${gap} ms, expected ≥ ${expected[i]}`);
        assert.ok(
          gap < expected[i]! + 250,
          `gap ${i} was ${gap} ms, expected about ${expected[i]}`,
        );
      });
      await eventually('drained', async () => (await h.queue.pending()) === 0);
      assert.equal(
        await h.queue.redis.hget(h.queue.failuresKey, 'test/a'),
        null,
        'success forgets failures',
      );
      const [job] = await h.queue.queue.getJobs(['completed']);
      assert.equal(
        job?.attemptsMade,
        1,
        'handler retries are not BullMQ attempts: only the finishing run counts',
      );
    },
  );
});

test('the last error is visible on a job waiting for its retry', async () => {
  await withHarness(
    'lasterror',
    async () => {
      throw new Error('apiserver unreachable');
    },
    { backoff: { baseMs: 60_000, capMs: 60_000, jitter: 0 } },
    async (h) => {
      await h.queue.enqueue('test/a');
      await eventually('delayed', async () => (await h.queue.counts()).delayed === 1);
      const [job] = await h.queue.queue.getJobs(['delayed']);
      assert.equal(job?.data.lastError, 'apiserver unreachable');
      assert.equal(job?.data.failures, 1);
    },
  );
});

test('a terminal error is not retried and stays in the failed set with its reason', async () => {
  await withHarness(
    'terminal',
    async (_key, _ctx, runs) => {
      if (runs.length === 1) throw new TerminalError('spec.module is not a valid reference');
      return runs.length === 2 ? terminal('still invalid') : done();
    },
    {},
    async (h) => {
      await h.queue.enqueue('test/a');
      await eventually('failed', async () => (await h.queue.counts()).failed === 1);
      await sleep(300);
      assert.equal(h.runs.length, 1);
      const [failed] = await h.queue.queue.getJobs(['failed']);
      assert.equal(failed?.failedReason, 'spec.module is not a valid reference');
      assert.equal(failed?.data.key, 'test/a');

      // A later event (e.g. the spec was fixed) runs the key again.
      await h.queue.enqueue('test/a');
      await eventually('second failure', async () => (await h.queue.counts()).failed === 2);
      assert.equal(h.runs.length, 2);
    },
  );
});

test('a key without a handler fails terminally', async () => {
  await withHarness(
    'nohandler',
    async () => done(),
    {},
    async (h) => {
      await h.queue.enqueue('unknown/a');
      await eventually('failed', async () => (await h.queue.counts()).failed === 1);
      const [failed] = await h.queue.queue.getJobs(['failed']);
      assert.match(failed?.failedReason ?? '', /no handler for function "unknown"/);
    },
  );
});

test('429 runs the key again after Retry-After without counting a failure, and pauses all writes', async () => {
  await withHarness(
    'throttled',
    async (_key, _ctx, runs) => {
      if (runs.length === 1)
        throw new ApiException(429, 'Too Many Requests', {}, { 'retry-after': '1' });
    },
    {},
    async (h) => {
      await h.queue.enqueue('test/a');
      await eventually('throttled', () => h.runs.length === 1);
      await sleep(50);
      assert.ok((await h.worker.limiter.tryAcquire()) > 500, 'writes are paused for Retry-After');
      await eventually('re-run', () => h.runs.length === 2, 3000);
      const gap = h.runs[1]!.at - h.runs[0]!.at;
      assert.ok(gap >= 990 && gap < 2000, `re-run ${gap} ms later`);
      assert.equal(h.runs[1]!.failures, 0, 'not counted as a failure');
      await eventually('drained', async () => (await h.queue.pending()) === 0);
      const [job] = await h.queue.queue.getJobs(['completed']);
      assert.equal(job?.attemptsMade, 1, 'the throttled run was not a BullMQ attempt');
    },
  );
});

test('429 does not grow the backoff of a key that is already failing', async () => {
  await withHarness(
    'throttled-backoff',
    async (_key, _ctx, runs) => {
      if (runs.length === 1) throw new Error('first failure');
      if (runs.length === 2)
        throw new ApiException(429, 'Too Many Requests', {}, { 'Retry-After': '0' });
      if (runs.length === 3) throw new Error('second failure');
    },
    { backoff: { baseMs: 100, capMs: 10_000, jitter: 0 } },
    async (h) => {
      await h.queue.enqueue('test/a');
      await eventually('four runs', () => h.runs.length === 4, 5000);
      assert.deepEqual(
        h.runs.map((r) => r.failures),
        [0, 1, 1, 2],
      );
      const gap = h.runs[3]!.at - h.runs[2]!.at;
      assert.ok(gap >= 195 && gap < 500, `second failure backed off ${gap} ms (2nd step, 200 ms)`);
    },
  );
});

test('409 re-runs the key at once, not counted as a failure', async () => {
  await withHarness(
    'conflict',
    async (_key, _ctx, runs) => {
      if (runs.length === 1) throw new ApiException(409, 'Conflict', {}, {});
    },
    { backoff: { baseMs: 5000, capMs: 5000, jitter: 0 } },
    async (h) => {
      await h.queue.enqueue('test/a');
      await eventually('re-run', () => h.runs.length === 2, 3000);
      const gap = h.runs[1]!.at - h.runs[0]!.at;
      assert.ok(gap < 300, `re-run ${gap} ms later`);
      assert.equal(h.runs[1]!.failures, 0);
    },
  );
});
