import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Registry } from 'prom-client';
import { QueueMetrics } from '../../../control-plane/queue/metrics.ts';
import { jobStates, type JobState } from '../../../control-plane/queue/work-queue.ts';

test('a scrape while Redis cannot answer leaves the queue depth out and keeps the rest', async () => {
  const registry = new Registry();
  let redisUp = true;
  const counts = Object.fromEntries(jobStates.map((s) => [s, 2])) as Record<JobState, number>;
  const metrics = new QueueMetrics({
    registry,
    depth: async () => {
      if (!redisUp)
        throw new Error("Stream isn't writeable and enableOfflineQueue options is false");
      return counts;
    },
  });
  metrics.enqueued('policy', false);
  assert.match(await registry.metrics(), /rollcall_queue_depth\{state="waiting"\} 2/);
  redisUp = false;
  const text = await registry.metrics();
  assert.doesNotMatch(text, /rollcall_queue_depth\{/);
  assert.match(text, /rollcall_queue_adds_total\{function="policy"\} 1/);
});
