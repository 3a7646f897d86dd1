// No lost update when rollcall's own processes go away: the watcher restarted, a worker
// SIGKILLed mid-job, the leading watcher killed with a standby waiting.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Redis } from 'ioredis';
import { testKubeConfig, uniqueName, watchUntil } from '../../support/kube.ts';
import { Processes } from '../../support/driver.ts';
import { prepareIdentities, type Identities } from '../../support/identities.ts';
import { policyManifest, policyServerManifest, SIM_IMAGE } from '../../support/manifests.ts';
import { redisUrl } from '../../support/redis.ts';
import { testDb, type RollcallProcess } from '../../support/rollcall.ts';
import { apply, isCurrent, POLICIES_PATH, type PolicyObject } from '../../support/scenario.ts';

const kc = testKubeConfig();
const namespace = 'rollcall-recovery';
const policy = (name: string, server: string, module: string) =>
  policyManifest(name, server, { module });
const summaryOf = (p: PolicyObject) => (isCurrent(p) ? p.status?.summary : undefined);

/** Resolves when every named policy has the wanted summary for its current generation. */
async function waitAll(names: string[], summary: string, timeoutMs = 90_000): Promise<void> {
  const seen = new Map<string, string | undefined>();
  await watchUntil<PolicyObject>(
    kc,
    POLICIES_PATH,
    (p) => {
      seen.set(p.metadata.name, summaryOf(p));
      return names.every((n) => seen.get(n) === summary);
    },
    { timeoutMs },
  );
}

describe('recovery of rollcall processes', () => {
  const server = uniqueName('rec').slice(0, 40);
  const procs = new Processes(namespace);
  const lock = ['--job-lock-ms', '2000'];
  /** Started by the first test, stopped by the second. */
  let firstWorker: RollcallProcess;
  /** Started by the first test, the leader the third one kills. */
  let secondWatcher: RollcallProcess;
  let ids: Identities;
  /** The watcher's and the worker's flags: their ServiceAccounts' tokens, and `more`. */
  const asWatcher = (...more: string[]) => ['--kubeconfig', ids.watcher, ...lock, ...more];
  const asWorker = (...more: string[]) => ['--kubeconfig', ids.worker, ...lock, ...more];

  before(async () => {
    await procs.prepare();
    ids = await prepareIdentities(namespace);
    procs.sim();
    await apply(policyServerManifest(server, { image: SIM_IMAGE, replicas: 2 }));
  });

  after(async () => {
    await procs.cleanUp();
    ids?.remove();
  });

  test('a change made while the watcher is down is reconciled once it is back', async () => {
    const watcher = procs.watcher('w1', asWatcher());
    firstWorker = procs.worker(asWorker());
    await apply(policy('rec-a', server, 'sim://ok'));
    await waitAll(['rec-a'], 'Ready');

    await watcher.stop();
    await apply(policy('rec-a', server, 'sim://fail?message=while+the+watcher+was+down'));
    secondWatcher = procs.watcher('w2', asWatcher());
    await waitAll(['rec-a'], 'Stalled');
  });

  test('a worker SIGKILLed mid-job loses nothing: its jobs run again on another worker', async () => {
    // One write per second keeps jobs active (waiting for tokens) long enough to kill them mid-run.
    await firstWorker.stop();
    const throttled = procs.worker(asWorker('--write-rate', '1', '--write-burst', '1'));
    const names = Array.from({ length: 8 }, (_, i) => `rec-b${i}`);
    await apply(...names.map((n) => policy(n, server, 'sim://ok')));

    const redis = new Redis(`${redisUrl()}/${testDb()}`);
    after(() => redis.quit());
    const deadline = Date.now() + 30_000;
    while ((await redis.llen('rollcall:reconcile:active')) === 0) {
      assert.ok(Date.now() < deadline, 'no job became active');
      await new Promise((r) => setTimeout(r, 50));
    }
    await throttled.kill();
    procs.worker(asWorker());
    await waitAll(names, 'Ready');
  });

  test('when the leading watcher is killed, the standby takes over within the lease duration', async () => {
    procs.watcher('w3', asWatcher());
    await new Promise((r) => setTimeout(r, 1000)); // let the standby start competing
    await secondWatcher.kill();
    const killedAt = Date.now();
    await apply(policy('rec-c', server, 'sim://ok'));
    await waitAll(['rec-c'], 'Ready', 60_000);
    assert.ok(
      Date.now() - killedAt < 15_000 + 10_000,
      'took over within the 15 s lease (plus reconcile time)',
    );
  });
});
