// Phase 6, memory: the RSS of an idle watcher and worker, then with `memPods` bare
// policy-server pods and `memPolicies` policies; then, on the same objects, `rollcall run` (all
// in one process) with a Redis of its own, the controller-runtime peer (its informer cache
// holds every watched object) and the poller's peak, which holds every object of a pass in
// memory.
import { POLICY_SERVER_LABEL, REPORT_ANNOTATION } from '../../api/constants.ts';
import { metric } from '../../test/support/prom-text.ts';
import { group, namespace, policyBody, queueIdle, version, type Bench } from '../context.ts';
import { startPeer } from '../subjects.ts';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { startRedis } from '../../tooling/cluster/redis.ts';
import {
  benchDir,
  pool,
  rssSampler,
  sleep,
  startProcess,
  waitHttpOk,
  type Proc,
} from '../support.ts';

export interface Memory {
  pods: number;
  policies: number;
  idle: { watcherMiB: number; workerMiB: number };
  loaded: {
    watcherMiB: number;
    watcherPeakMiB: number;
    workerMiB: number;
    workerPeakMiB: number;
  };
  /**
   * `rollcall run` and its own Redis once idle, and their sum's peak from the start;
   * `redisDataMiB` is what Redis says its data takes (INFO used_memory), the rest of its RSS
   * being the allocator's and the process's.
   */
  allInOne: { runMiB: number; redisMiB: number; redisDataMiB: number; peakMiB: number };
  /** The peer once synced and idle, and its peak from start. */
  peerMiB: number;
  peerPeakMiB: number;
  pollerPeakMiB: number;
}

export async function memory(bench: Bench): Promise<Memory> {
  const { size, recorder } = bench;
  const redisUrl = `${bench.redisUrl}/${++bench.phaseDb}`;
  const watcher = await bench.startRole('watcher', 'watcher', redisUrl);
  const [worker] = await bench.startWorkers('worker-', 1, redisUrl);
  await waitHttpOk(watcher.port, '/readyz');
  await waitHttpOk(worker!.port, '/readyz');
  while (!(await queueIdle(watcher.port))) await sleep(200);
  await sleep(1000);
  const idle = {
    watcherMiB: rssSampler(() => [watcher.child.pid]).stop(),
    workerMiB: rssSampler(() => [worker!.child.pid]).stop(),
  };
  const watcherPeak = rssSampler(() => [watcher.child.pid]);
  const workerPeak = rssSampler(() => [worker!.child.pid]);
  const memReport = bench.report(['lat-000', 'lat-001', 'lat-002'], 1, 'Loaded');
  await pool(
    Array.from({ length: size.memPods }, (_, i) => `mem-pod-${String(i).padStart(5, '0')}`),
    16,
    (name) =>
      bench.core.createNamespacedPod({
        namespace,
        body: {
          metadata: {
            name,
            labels: { [POLICY_SERVER_LABEL]: 'mem-pods' },
            annotations: { [REPORT_ANNOTATION]: memReport },
          },
          // Gated: never scheduled, so kwok and the scheduler stay out of the measurement.
          spec: {
            schedulingGates: [{ name: 'bench.rollcall.dev/gated' }],
            containers: [{ name: 'c', image: 'sim://none' }],
          },
        },
      }),
  );
  await pool(bench.memNames, 16, (n) =>
    bench.custom.createClusterCustomObject({
      group,
      version,
      plural: 'policies',
      body: policyBody(n, 'mem'),
    }),
  );
  await recorder.until(
    () => bench.memNames.every((n) => recorder.latest.get(n)?.status?.summary === 'Stalled'),
    600_000,
    'memory policies reconciled',
  );
  while (!(await queueIdle(watcher.port))) await sleep(200);
  await sleep(2000);
  const loaded = {
    watcherMiB: rssSampler(() => [watcher.child.pid]).stop(),
    watcherPeakMiB: watcherPeak.stop(),
    workerMiB: rssSampler(() => [worker!.child.pid]).stop(),
    workerPeakMiB: workerPeak.stop(),
  };
  await bench.stopAll([watcher, worker!]);
  const allInOne = await runWithRedis(bench);

  // The peer: from its start (the initial list fills its cache) until its queue is empty.
  let peer: Proc | undefined;
  const peerPeak = rssSampler(() => [peer?.child.pid]);
  peer = await startPeer(bench, 'peer-mem', (p) => (peer = p));
  while ((await metric(peer.port, 'workqueue_depth', { name: 'policy' })) > 0) await sleep(200);
  await sleep(2000);
  const peerMiB = rssSampler(() => [peer?.child.pid]).stop();
  const peerPeakMiB = peerPeak.stop();
  await bench.stopAll([peer]);

  // Baseline: the poller holds every object of a pass in memory.
  const poller = await startProcess('poller-mem', 'bench/poller.ts', [namespace], {
    KUBECONFIG: bench.proxy.kubeconfig,
  });
  bench.running.add(poller);
  const pollerPeak = rssSampler(() => [poller.child.pid]);
  await sleep(bench.quick ? 4000 : 10_000);
  const pollerPeakMiB = pollerPeak.stop();
  await bench.stopAll([poller]);
  return {
    pods: size.memPods,
    policies: size.memPolicies + bench.latNames.length + bench.stormNames.length,
    idle,
    loaded,
    allInOne,
    peerMiB,
    peerPeakMiB,
    pollerPeakMiB,
  };
}

/** Redis's own account of its data: INFO's used_memory, in MiB. */
async function usedMemoryMiB(url: string): Promise<number> {
  const client = new Redis(url);
  try {
    const info = await client.info('memory');
    return Number(/^used_memory:(\d+)/m.exec(info)?.[1] ?? NaN) / 2 ** 20;
  } finally {
    client.disconnect();
  }
}

/**
 * `rollcall run` on an empty Redis of its own, from its start (its lists fill the projections,
 * then a run per Policy) until its queue is idle: what a single-process install costs.
 */
async function runWithRedis(bench: Bench): Promise<Memory['allInOne']> {
  const redis = await startRedis({ dir: join(benchDir, 'redis-memory') });
  let run: Proc | undefined;
  const peak = rssSampler(() => [run?.child.pid, redis.pid]);
  try {
    run = await bench.startRole('run-mem', 'run', `${redis.url}/0`);
    await waitHttpOk(run.port, '/readyz');
    await sleep(2000);
    while (!(await queueIdle(run.port))) await sleep(200);
    await sleep(2000);
    const pid = run.child.pid;
    return {
      runMiB: rssSampler(() => [pid]).stop(),
      redisMiB: rssSampler(() => [redis.pid]).stop(),
      redisDataMiB: await usedMemoryMiB(redis.url),
      peakMiB: peak.stop(),
    };
  } finally {
    peak.stop();
    if (run) await bench.stopAll([run]);
    await redis.stop();
  }
}
