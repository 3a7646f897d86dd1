// Fault 1: Redis is SIGKILLed mid-storm and comes back empty. Redis holds only derived
// state, so the watcher must rebuild the projections and re-enqueue every key
// (watcher.ts checkRedis) and the end state must still match the model.
import { after, test } from 'node:test';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { installCrds } from '../../../roles/install-crds.ts';
import { testCluster, testKubeConfig } from '../../support/kube.ts';
import { deleteRollcallObjects } from '../../support/rollcall.ts';
import { Processes, Scenario, seedFromEnv } from './driver.ts';
import { PrivateRedis } from './faults.ts';

const kc = testKubeConfig();
const namespace = 'rel-redis';

test('Redis killed and restarted empty mid-storm loses nothing', { timeout: 120_000 }, async () => {
  await installCrds(kc, { info: () => {} });
  const redis = new PrivateRedis(join(testCluster().dir, 'rel-redis'));
  await redis.start();
  const procs = new Processes(namespace, { REDIS_URL: redis.url });
  after(async () => {
    await procs.stopAll();
    await redis.kill();
    await deleteRollcallObjects(kc);
  });
  const s = new Scenario(kc, namespace, seedFromEnv());
  procs.run();
  procs.sim();
  await s.setup(2);
  await s.storm(6);
  await s.converge(60_000);
  await s.storm(4);
  await redis.kill();
  await s.storm(6); // the cluster moves on while Redis is gone
  await sleep(1000);
  await redis.start(); // same port, empty
  await s.storm(4);
  await s.converge(75_000);
});
