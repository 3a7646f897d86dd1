// The producer's Redis client on a Redis Cluster whose primary is SIGKILLed under load: every
// MULTI (a projection write) and every bulk add (an enqueue) must settle, resolved or rejected.
// One that never settles stalls the watcher's writes or a fan-out job for good: the CI failure
// of the Cluster storm in test/integration/reliability/redis-replicated.test.ts.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { startRedisCluster } from '../../../tooling/cluster/redis-groups.ts';
import { ProjectionStore } from '../../../control-plane/projections/store.ts';
import { createRedis } from '../../../control-plane/queue/connection.ts';
import { WorkQueue } from '../../../control-plane/queue/work-queue.ts';
import { testCluster } from '../../support/kube.ts';
import { waitFor } from '../../support/poll.ts';

test(
  'on a Redis Cluster, every MULTI and bulk add of a producer settles across a failover',
  { timeout: 120_000 },
  async () => {
    const cluster = await startRedisCluster({
      dir: join(testCluster().dir, 'queue-cluster'),
      replicas: 1,
    });
    const producer = createRedis(cluster.url, 'producer');
    producer.on('error', () => {}); // the kill makes it complain; what counts is settling
    after(async () => {
      producer.disconnect();
      await cluster.stop();
    });
    const store = new ProjectionStore(producer);
    const queue = new WorkQueue({ connection: producer });
    await waitFor(
      async () => (await store.policiesOfServer('ps').catch(() => null)) !== null,
      10_000,
      'the Cluster to answer',
    );

    // Calls in flight, by when they started; each loop starts its next call once one settled.
    const inFlight = new Map<number, { what: string; since: number }>();
    let calls = 0;
    let running = true;
    const loop = async (what: string, call: () => Promise<unknown>) => {
      while (running) {
        const id = calls++;
        inFlight.set(id, { what, since: Date.now() });
        await call().catch(() => {});
        inFlight.delete(id);
        await sleep(5);
      }
    };
    const loops = [
      loop('MULTI', () => store.policiesOfServer('ps')),
      loop('MULTI', () => store.policiesOfServer('ps')),
      loop('bulk add', () => queue.enqueueMany(['fan-out/a', 'fan-out/b', 'policy/c'])),
      loop('bulk add', () => queue.enqueueMany(['fan-out/a', 'fan-out/b', 'policy/c'])),
    ];
    await sleep(1000);
    const owner = await cluster.ownerOf('{rollcall}');
    await owner.kill();
    await waitFor(
      async () => (await cluster.ownerOf('{rollcall}')) !== owner,
      30_000,
      'a replica to take the slot over',
    );
    await sleep(2000); // calls against the new primary

    running = false;
    const ended = await Promise.race([Promise.all(loops).then(() => true), sleep(10_000)]);
    const stuck = [...inFlight.values()].map((c) => `${c.what} for ${Date.now() - c.since} ms`);
    assert.ok(ended, `calls that never settled: ${stuck.join(', ')}`);
  },
);
