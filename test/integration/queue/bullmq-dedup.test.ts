// Facts about BullMQ 6.7's deduplication that queue/ builds on, checked against real Redis.
// Plain BullMQ here, no rollcall code: if an upgrade changes one of these, this file says which.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DelayedError, Queue, QueueEvents, Worker, type Job, type JobsOptions } from 'bullmq';
import { Redis } from 'ioredis';
import { redisUrl, uniquePrefix } from '../../support/redis.ts';
import { sleep } from './harness.ts';
import { eventually } from '../../support/poll.ts';

type Processor = (job: Job<{ n: number }>, token?: string) => Promise<void>;

async function setup(
  name: string,
  processor: Processor,
  workerOpts: { lockDuration?: number; stalledInterval?: number } = {},
) {
  const prefix = uniquePrefix(name);
  const redis = new Redis(redisUrl(), { maxRetriesPerRequest: null });
  const queue = new Queue<{ n: number }>('q', { connection: redis, prefix });
  const runs: { id: string; n: number; at: number }[] = [];
  const worker = new Worker<{ n: number }>(
    'q',
    async (job, token) => {
      runs.push({ id: job.id ?? '', n: job.data.n, at: Date.now() });
      await processor(job, token);
    },
    { connection: redis, prefix, ...workerOpts },
  );
  await worker.waitUntilReady();
  const dedupKey = (id: string) => queue.toKey(`de:${id}`);
  return {
    queue,
    worker,
    runs,
    redis,
    dedupKey,
    async close() {
      await worker.close(true);
      await queue.obliterate({ force: true }).catch(() => {});
      await queue.close();
      await redis.quit();
    },
  };
}

const dedup = (extra: object = {}): JobsOptions => ({
  deduplication: { id: 'policy/a', keepLastIfActive: true, ...extra },
});

test('keepLastIfActive: adds during a run become one successor carrying the last add, run after it', async () => {
  const s = await setup('keeplast', () => sleep(150));
  try {
    const first = await s.queue.add('x', { n: 0 }, { ...dedup(), jobId: 'j0' });
    await eventually('first run', () => s.runs.length === 1);
    const returned = [];
    for (let n = 1; n <= 10; n++)
      returned.push((await s.queue.add('x', { n }, { ...dedup(), jobId: `j${n}` })).id);
    assert.deepEqual(new Set(returned), new Set([first.id]), 'every add returns the active job id');
    assert.equal(
      await s.redis.exists(s.queue.toKey('dn:policy/a')),
      1,
      'the successor is held in <prefix>:<queue>:dn:<id>',
    );
    assert.equal(
      (await s.queue.getJobCounts('waiting')).waiting,
      0,
      'nothing waits while the job runs',
    );
    await eventually('successor ran', () => s.runs.length === 2);
    await sleep(300);
    assert.equal(s.runs.length, 2);
    assert.deepEqual({ id: s.runs[1]!.id, n: s.runs[1]!.n }, { id: 'j10', n: 10 });
    assert.ok(s.runs[1]!.at - s.runs[0]!.at >= 150, 'after the first run, not beside it');
  } finally {
    await s.close();
  }
});

test('native retries: a successor stored during a failing run waits until all retries are over', async () => {
  // Why queue/ does not use BullMQ attempts for handler errors: an event that arrived during
  // the first attempt is served only after the last attempt, however long the backoff.
  const s = await setup('native-retry', async (job) => {
    await sleep(50);
    if (job.id === 'j0') throw new Error('fails');
  });
  try {
    await s.queue.add(
      'x',
      { n: 0 },
      { ...dedup(), jobId: 'j0', attempts: 3, backoff: { type: 'fixed', delay: 400 } },
    );
    await eventually('first attempt', () => s.runs.length === 1);
    const duringRun = await s.queue.add('x', { n: 1 }, { ...dedup(), jobId: 'j1' });
    assert.equal(duringRun.id, 'j0');
    await eventually(
      'in backoff',
      async () => (await s.queue.getJobCounts('delayed')).delayed === 1,
    );
    const duringBackoff = await s.queue.add('x', { n: 2 }, { ...dedup(), jobId: 'j2' });
    assert.equal(duringBackoff.id, 'j0', 'an add during backoff joins the delayed retry');
    await eventually('successor ran', () => s.runs.some((r) => r.id === 'j1'), 5000);
    const ids = s.runs.map((r) => r.id);
    assert.deepEqual(ids, ['j0', 'j0', 'j0', 'j1'], 'the successor ran only after three attempts');
    assert.ok(s.runs[3]!.at - s.runs[0]!.at >= 800);
  } finally {
    await s.close();
  }
});

test('moveToDelayed: an add during the delay joins the delayed job and waits, unless it reschedules', async () => {
  let delayed = 0;
  const s = await setup('delayed', async (job, token) => {
    if (delayed++ < 2) {
      await job.moveToDelayed(Date.now() + 60_000, token);
      throw new DelayedError();
    }
  });
  try {
    await s.queue.add('x', { n: 0 }, { ...dedup(), jobId: 'j0' });
    await eventually('delayed', async () => (await s.queue.getJobCounts('delayed')).delayed === 1);
    const plain = await s.queue.add('x', { n: 1 }, { ...dedup(), jobId: 'j1' });
    assert.equal(plain.id, 'j0');
    await sleep(300);
    assert.equal(s.runs.length, 1, 'without reschedule the add waits out the 60 s delay');

    const rescheduled = await s.queue.add(
      'x',
      { n: 2 },
      { ...dedup({ reschedule: true }), jobId: 'j2' },
    );
    assert.equal(rescheduled.id, 'j0', 'reschedule keeps the job and its id');
    await eventually('rescheduled run', () => s.runs.length === 2, 2000);
    assert.ok(s.runs[1]!.at - s.runs[0]!.at < 1000);
  } finally {
    await s.close();
  }
});

test('a job whose worker died stays deduplicated until another worker re-runs it, then its successor runs', async () => {
  const prefix = uniquePrefix('stalled');
  const redis = new Redis(redisUrl(), { maxRetriesPerRequest: null });
  const queue = new Queue('q', { connection: redis, prefix });
  const runs: string[] = [];
  // The first worker takes the job and never finishes it, then vanishes without a word.
  const doomedRedis = new Redis(redisUrl(), { maxRetriesPerRequest: null });
  const doomed = new Worker(
    'q',
    async (job) => {
      runs.push(`doomed:${job.id}`);
      await new Promise(() => {});
    },
    { connection: doomedRedis, prefix, lockDuration: 600, stalledInterval: 300 },
  );
  // (Every worker must use the same stalledInterval: the last check sets a shared
  // `stalled-check` key for that long, and no worker checks again before it expires.)
  let survivor: Worker | undefined;
  try {
    await queue.add('x', {}, { ...dedup(), jobId: 'j0' });
    await eventually('doomed took the job', () => runs.length === 1);
    await doomed.close(true);
    doomedRedis.disconnect();

    const adds = [
      await queue.add('x', {}, { ...dedup(), jobId: 'j1' }),
      await queue.add('x', {}, { ...dedup(), jobId: 'j2' }),
    ];
    assert.deepEqual(
      adds.map((j) => j.id),
      ['j0', 'j0'],
      'the dead job still holds the key',
    );

    const events = new QueueEvents('q', { connection: { url: redisUrl() } as never, prefix });
    const stalled: string[] = [];
    events.on('stalled', ({ jobId }) => stalled.push(jobId));
    await events.waitUntilReady();
    survivor = new Worker(
      'q',
      async (job) => {
        runs.push(`survivor:${job.id}`);
        await sleep(20);
      },
      { connection: redis, prefix, lockDuration: 600, stalledInterval: 300 },
    );
    await eventually('stalled job and successor ran', () => runs.length === 3, 10_000);
    assert.deepEqual(runs, ['doomed:j0', 'survivor:j0', 'survivor:j2']);
    await eventually('stalled event', () => stalled.includes('j0'));
    await events.close();
  } finally {
    await survivor?.close();
    await queue.obliterate({ force: true }).catch(() => {});
    await queue.close();
    await redis.quit();
  }
});

test('removeOnComplete and removeOnFail do not strand the deduplication key', async () => {
  const s = await setup('retention', async (job) => {
    if (job.data.n % 2 === 1) throw new Error('odd');
  });
  try {
    for (let n = 0; n < 4; n++) {
      await s.queue.add(
        'x',
        { n },
        { ...dedup(), jobId: `j${n}`, removeOnComplete: true, removeOnFail: true },
      );
      await eventually(`run ${n}`, () => s.runs.length === n + 1);
      await eventually(
        'dedup key released',
        async () => (await s.redis.exists(s.dedupKey('policy/a'))) === 0,
      );
    }
    assert.deepEqual(
      s.runs.map((r) => r.id),
      ['j0', 'j1', 'j2', 'j3'],
      'each add after a finish made a new job',
    );
    const counts = await s.queue.getJobCounts('completed', 'failed');
    assert.deepEqual(counts, { completed: 0, failed: 0 });
  } finally {
    await s.close();
  }
});

test('trimming old finished jobs by count does not delete the key of a newer pending job', async () => {
  let release = () => {};
  const s = await setup('trim', async (job) => {
    if (job.id === 'j1') await new Promise<void>((resolve) => (release = resolve));
  });
  try {
    await s.queue.add('x', { n: 0 }, { ...dedup(), jobId: 'j0', removeOnComplete: { count: 1 } });
    await eventually('j0', () => s.runs.length === 1);
    await s.queue.add('x', { n: 1 }, { ...dedup(), jobId: 'j1', removeOnComplete: { count: 1 } });
    await eventually('j1 active', () => s.runs.length === 2);
    await s.queue.add('x', { n: 2 }, { ...dedup(), jobId: 'j2', removeOnComplete: { count: 1 } });
    release();
    await eventually('j2 ran', () => s.runs.length === 3);
    assert.deepEqual(
      s.runs.map((r) => r.id),
      ['j0', 'j1', 'j2'],
    );
  } finally {
    await s.close();
  }
});

test('a plain custom jobId blocks every later add of that id once completed (why ids alone are not enough)', async () => {
  const s = await setup('jobid', async () => {});
  try {
    await s.queue.add('x', { n: 0 }, { jobId: 'policy_a' });
    await eventually('ran', () => s.runs.length === 1);
    await eventually(
      'completed',
      async () => (await s.queue.getJobCounts('completed')).completed === 1,
    );
    await s.queue.add('x', { n: 1 }, { jobId: 'policy_a' });
    await sleep(300);
    assert.equal(s.runs.length, 1, 'the second add was silently dropped');
  } finally {
    await s.close();
  }
});
