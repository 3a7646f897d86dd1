// Fault 1: Redis is SIGKILLed mid-storm and comes back empty. Redis holds only derived
// state, so the watcher must rebuild the projections and re-enqueue every key
// (watcher.ts checkRedis) and the end state must still match the model.
import { after, test } from 'node:test';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { testCluster } from '../../support/kube.ts';
import { faultScenario } from '../../support/driver.ts';
import { PrivateRedis } from '../../support/private-redis.ts';

const namespace = 'rel-redis';

test('Redis killed and restarted empty mid-storm loses nothing', { timeout: 120_000 }, async () => {
  const redis = new PrivateRedis(join(testCluster().dir, 'rel-redis'));
  await redis.start();
  const { s } = await faultScenario(namespace, { env: { REDIS_URL: redis.url } });
  after(() => redis.kill()); // once rollcall's processes have stopped
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
