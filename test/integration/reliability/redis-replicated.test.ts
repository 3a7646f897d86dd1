// Replicated Redis on loopback, rollcall on it, the reliability driver's storms against its model.
//
// Sentinel: 3 redis-server and 3 redis-sentinel, rollcall on `redis+sentinel://`. The primary
// is SIGKILLed mid-storm; the Sentinels promote a replica, every rollcall client follows it,
// and the end state must equal the model. The watcher counts its writes in Redis (watcher.ts
// countWrite): a new primary that kept them gets only the writes that failed during the
// failover, one that missed some gets a full rebuild.
//
// Cluster: 3 primaries with a replica each, rollcall on `redis+cluster://`. BullMQ's scripts,
// the write rate limiter and the projections' MULTIs touch several keys at once, which a
// Cluster allows only within one slot: every key of rollcall carries the hash tag `{rollcall}`
// (lib/redis/client.ts keyPrefix). A storm must converge with every key in that slot; then
// the primary of that slot is SIGKILLed mid-storm and the storm must still converge.
import assert from 'node:assert/strict';
import { after, describe, test, type TestContext } from 'node:test';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from '../../../tooling/cluster/ports.ts';
import {
  redisCommand,
  startRedisCluster,
  startSentinelGroup,
} from '../../../tooling/cluster/redis-groups.ts';
import { installCrds } from '../../../control-plane/install-crds.ts';
import {
  firstStatusAfter,
  Processes,
  Scenario,
  seedFromEnv,
  type Mark,
} from '../../support/driver.ts';
import { testCluster, testKubeConfig } from '../../support/kube.ts';
import { waitFor } from '../../support/poll.ts';
import { metric } from '../../support/prom-text.ts';
import { deleteRollcallObjects, ensureNamespace, lastProblems } from '../../support/rollcall.ts';

const kc = testKubeConfig();
const namespace = 'rel-redis-ha';
const lock = ['--job-lock-ms', '2000'];
const lostWrites = { reason: 'redis lost writes' };

/** The rollcall processes of the test running now (none between tests). */
let running: Processes | undefined;

/** A test body whose failure also quotes the last warnings and errors rollcall logged. */
function quotingLogs(body: (t: TestContext) => Promise<void>) {
  return async (t: TestContext) => {
    try {
      await body(t);
    } catch (err) {
      if (!(err instanceof Error) || !running) throw err;
      const logged = lastProblems(running.all);
      throw new Error(`${err.message}\nrollcall's last warnings and errors:\n  ${logged}`, {
        cause: err,
      });
    }
  };
}

/**
 * rollcall's watcher (with an HTTP port: /readyz, /metrics) and the simulator on `redis`, plus
 * workers in the watcher's process or, `separateWorker`, in one of their own, and `moreWorkers`
 * more; once ready. Stopped after the test, with `redis`.
 */
async function startOn(
  redis: { url: string; stop(): Promise<void> },
  { separateWorker = false, moreWorkers = 0, args = [] as string[] } = {},
) {
  await installCrds(kc, { info: () => {} });
  await ensureNamespace(kc, namespace); // the watcher's Lease lives there
  const port = await freePort();
  const procs = new Processes(namespace, { REDIS_URL: redis.url });
  running = procs;
  after(async () => {
    running = undefined;
    await procs.stopAll();
    await redis.stop();
    await deleteRollcallObjects(kc);
  });
  const http = ['--port', String(port), ...lock, ...args];
  if (separateWorker) procs.watcher('w0', http);
  else procs.run(http);
  const worker = separateWorker ? procs.worker([...lock, ...args]) : undefined;
  for (let i = 0; i < moreWorkers; i++) procs.worker([...lock, ...args]);
  procs.sim();
  const readyz = async () => {
    const res = await fetch(`http://127.0.0.1:${port}/readyz`);
    return { status: res.status, text: await res.text() };
  };
  await waitFor(async () => (await readyz()).status === 200, 60_000, 'rollcall to be ready');
  return { procs, port, readyz, worker };
}

describe('rollcall on Redis Sentinel', () => {
  test(
    'the primary SIGKILLed mid-storm: a replica takes over, no update is lost, no rebuild',
    { timeout: 240_000 },
    quotingLogs(async (t: TestContext) => {
      const group = await startSentinelGroup({ dir: join(testCluster().dir, 'rel-sentinel') });
      const { port, readyz } = await startOn(group);
      const oldPrimary = `127.0.0.1:${group.servers[0]!.port}`;
      assert.match((await readyz()).text, new RegExp(`primary ${oldPrimary}; no failover seen`));
      assert.equal(await metric(port, 'rollcall_redis_primary', { address: oldPrimary }), 1);

      const s = new Scenario(kc, namespace, seedFromEnv());
      await s.setup(2);
      await s.storm(8);
      await s.converge(60_000);

      let kill: Mark | undefined;
      const recovered = firstStatusAfter(kc, () => kill);
      const storm = s.storm(24, 100);
      await sleep(800); // mid-storm
      kill = s.mark();
      await group.servers[0]!.kill();
      await group.waitForFailover(group.servers[0]!.port);
      const failoverMs = Date.now() - kill.at;
      const statusMs = await recovered;
      await storm;
      await s.converge(90_000);
      t.diagnostic(
        `kill → Sentinels named a new primary: ${failoverMs} ms; kill → first status of a change made after it: ${statusMs} ms (Sentinel down-after 2 s, seed ${s.seed})`,
      );

      // A Sentinel that finishes the failover late publishes +switch-master again, and ioredis
      // reconnects once more (seen in CI ~1 s after the others): readiness may blip meanwhile.
      await waitFor(async () => (await readyz()).status === 200, 10_000, 'rollcall to be ready');
      const failovers = await metric(port, 'rollcall_redis_failovers_total');
      const newPrimary = `127.0.0.1:${await group.primaryPort()}`;
      const ready = await readyz();
      assert.equal(ready.status, 200, ready.text);
      assert.match(
        ready.text,
        new RegExp(`primary ${newPrimary}; ${failovers} failovers?, last at \\S+ \\(from `),
      );
      assert.ok(failovers >= 1, `${failovers} failovers counted`);
      assert.equal(await metric(port, 'rollcall_redis_primary', { address: newPrimary }), 1);
      assert.equal(await metric(port, 'rollcall_redis_primary', { address: oldPrimary }), 0);
      const at = await metric(port, 'rollcall_redis_last_failover_timestamp_seconds');
      assert.ok(at * 1000 >= kill.at && at * 1000 <= Date.now(), `failover at ${at}`);
      // Replication on loopback outruns a kill: the replica kept every write the watcher was
      // told had succeeded, so only the writes that failed meanwhile were made again. (A second
      // failover to a replica still syncing may lose some: then a rebuild is right.)
      if (failovers === 1)
        assert.equal(await metric(port, 'rollcall_watcher_rebuilds_total', lostWrites), 0);
    }),
  );

  test(
    'a failover to replicas that missed writes: the watcher sees the lower count and rebuilds',
    { timeout: 240_000 },
    quotingLogs(async () => {
      const group = await startSentinelGroup({ dir: join(testCluster().dir, 'rel-sentinel-lag') });
      const { procs, port, worker } = await startOn(group, { separateWorker: true });
      const s = new Scenario(kc, namespace, seedFromEnv());
      await s.setup(2);
      await s.storm(8);
      await s.converge(60_000);

      // No worker runs, the replicas stop receiving: the primary takes the projections and
      // keys of a few changes, then dies with them. Only a rebuild can bring them back.
      await worker!.stop();
      await group.cutReplication();
      await s.createPolicy();
      await s.storm(5);
      await sleep(1000); // the watcher wrote them
      await group.servers[0]!.kill();
      await group.waitForFailover(group.servers[0]!.port);
      procs.worker(lock);
      await s.converge(90_000);
      assert.ok(
        (await metric(port, 'rollcall_watcher_rebuilds_total', lostWrites)) >= 1,
        'the watcher rebuilt the projections of the primary that lost writes',
      );
    }),
  );
});

test(
  'a storm on a 3-primary Redis Cluster converges to the model, also across a failover of its slot',
  { timeout: 240_000 },
  quotingLogs(async (t: TestContext) => {
    const cluster = await startRedisCluster({
      dir: join(testCluster().dir, 'rel-cluster'),
      replicas: 1,
    });
    // Two workers: the queue and the write cap's bucket (opt-in; its script takes two keys)
    // are shared across processes.
    const { port, readyz } = await startOn(cluster, {
      moreWorkers: 1,
      args: ['--write-rate', '500'],
    });
    const s = new Scenario(kc, namespace, seedFromEnv());
    await s.setup(2);
    await s.storm(20);
    await s.converge(90_000);

    // Every key rollcall wrote is in one slot, on the node that owns it, and /readyz names it.
    const owner = await cluster.ownerOf('{rollcall}');
    const keysByNode = await Promise.all(
      cluster.nodes.map(async (n) => (await redisCommand(n.port, 'KEYS', '*')) as string[]),
    );
    const holders = cluster.nodes.filter((_, i) => keysByNode[i]!.length > 0);
    const keys = keysByNode[cluster.nodes.indexOf(owner)]!;
    assert.ok(
      keys.some((k) => k.startsWith('{rollcall}:reconcile:')),
      keys.join(' '),
    );
    assert.ok(keys.includes('{rollcall}:proj:synced'), keys.join(' '));
    assert.ok(keys.includes('{rollcall}:ratelimit:kube-writes'), keys.join(' '));
    assert.ok(
      keys.some((k) => k.startsWith('{rollcall}:proj:report:')),
      keys.join(' '),
    );
    const slots = new Set(
      await Promise.all(keys.map((k) => redisCommand(owner.port, 'CLUSTER', 'KEYSLOT', k))),
    );
    assert.equal(slots.size, 1, `keys in slots ${[...slots].join(', ')}`);
    // Only the owner and its replica hold keys.
    assert.equal(holders.length, 2, `keys on ${holders.map((n) => n.name).join(', ')}`);
    const oldPrimary = `127.0.0.1:${owner.port}`;
    assert.match((await readyz()).text, new RegExp(`primary ${oldPrimary}; no failover seen`));

    let kill: Mark | undefined;
    const recovered = firstStatusAfter(kc, () => kill);
    const storm = s.storm(24, 100);
    await sleep(800); // mid-storm
    kill = s.mark();
    await owner.kill();
    const statusMs = await recovered;
    await storm;
    await s.converge(90_000);
    const promoted = await cluster.ownerOf('{rollcall}');
    t.diagnostic(
      `kill of the {rollcall} slot's primary → first status of a change made after it: ${statusMs} ms (cluster-node-timeout 2 s, seed ${s.seed})`,
    );
    const newPrimary = `127.0.0.1:${promoted.port}`;
    assert.notEqual(newPrimary, oldPrimary);
    assert.match(
      (await readyz()).text,
      new RegExp(`primary ${newPrimary}; 1 failover, last at \\S+ \\(from ${oldPrimary}\\)`),
    );
    assert.equal(await metric(port, 'rollcall_redis_primary', { address: newPrimary }), 1);
    assert.equal(await metric(port, 'rollcall_redis_failovers_total'), 1);
  }),
);
