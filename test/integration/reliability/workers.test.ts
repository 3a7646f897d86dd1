// Fault 3: a worker SIGKILLed mid-job, then every worker down for a while. BullMQ's stalled-job
// recovery (a job's lock expires after --job-lock-ms) must run the dead worker's jobs again,
// and keys enqueued while no worker runs must wait in Redis until workers are back.
import { after, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { testKubeConfig } from '../../support/kube.ts';
import { redisUrl } from '../../support/redis.ts';
import { testDb } from '../../support/rollcall.ts';
import { Processes, Scenario, seedFromEnv } from '../../support/driver.ts';

const kc = testKubeConfig();
const namespace = 'rel-workers';
// REL_JOB_LOCK_MS lets a run show what happens without stalled-job recovery (e.g. 600000).
const lock = ['--job-lock-ms', process.env.REL_JOB_LOCK_MS ?? '2000'];

test(
  'a worker killed mid-job and all workers down for a while lose no key',
  { timeout: 120_000 },
  async () => {
    const redis = new Redis(`${redisUrl()}/${testDb()}`);
    await redis.flushdb(); // a fresh queue: this test counts active jobs
    const procs = new Processes(namespace);
    await procs.prepare();
    after(async () => {
      await procs.cleanUp();
      redis.disconnect();
    });
    const s = new Scenario(kc, namespace, seedFromEnv());
    procs.watcher('w0');
    procs.sim();
    const victim = procs.worker(lock);
    await s.setup(2);
    // Kill the only worker while it holds jobs: their locks now expire instead of being released.
    const storm = s.storm(12, 30);
    while ((await redis.llen('rollcall:reconcile:active')) === 0) await sleep(5);
    await victim.kill();
    await storm;
    await s.storm(5); // no worker at all: keys wait in Redis
    await sleep(3000);
    procs.worker(lock);
    procs.worker(lock);
    await s.converge(70_000);
  },
);
