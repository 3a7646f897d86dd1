// The soak: random operations mixed with faults (a worker SIGKILLed, a watcher — maybe the
// leader — SIGKILLed, Redis emptied) for N minutes; then the end state must equal the model.
// Runs against the cluster and Redis of the environment (KUBECONFIG, ROLLCALL_LOCAL_DIR,
// REDIS_URL): `npm test` sets them for its soak test, bench/soak.ts for `npm run soak`.
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { installCrds } from '../control-plane/install-crds.ts';
import { testKubeConfig } from '../test/support/kube.ts';
import { deleteRollcallObjects, testDb } from '../test/support/rollcall.ts';
import { Processes, Scenario, seedFromEnv } from '../test/support/driver.ts';

const log = (line: string) => console.error(`[soak] ${line}`);

/** Runs the soak against the cluster in KUBECONFIG and REDIS_URL; throws with the diff on a mismatch. */
export async function soak(minutes: number, seed = seedFromEnv()): Promise<void> {
  const kc = testKubeConfig();
  const namespace = 'rel-soak';
  await installCrds(kc, { info: () => {} });
  const redis = new Redis(`${process.env.REDIS_URL}/${testDb()}`);
  const procs = new Processes(namespace);
  const s = new Scenario(kc, namespace, seed);
  log(`seed ${seed}, ${minutes} min`);
  try {
    const lock = ['--job-lock-ms', '2000'];
    let watchers = [procs.watcher('soak-a'), procs.watcher('soak-b')];
    let workers = [procs.worker(lock), procs.worker(lock)];
    procs.sim();
    await s.setup(3);
    const end = Date.now() + minutes * 60_000;
    let round = 0;
    while (Date.now() < end) {
      await s.storm(8, 100);
      const fault = s.random();
      if (fault < 0.33) {
        log('fault: SIGKILL a worker, start a new one');
        const [victim, ...rest] = workers;
        await victim!.kill();
        workers = [...rest, procs.worker(lock)];
      } else if (fault < 0.66) {
        log('fault: SIGKILL a watcher (maybe the leader), start a new standby');
        const [victim, ...rest] = watchers;
        await victim!.kill();
        watchers = [...rest, procs.watcher(`soak-${round}`)];
      } else {
        log('fault: Redis emptied (as if restarted empty)');
        await redis.flushdb();
      }
      round++;
      await sleep(1000);
    }
    log(`${s.log.length} operations in ${round} rounds; waiting for convergence`);
    await s.converge(90_000);
    log('converged: the cluster matches the model');
  } finally {
    redis.disconnect();
    await procs.stopAll();
    await deleteRollcallObjects(kc);
  }
}
