// No lost update when rollcall's own processes go away: the watcher restarted, a worker
// SIGKILLed mid-job, the leading watcher killed with a standby waiting.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Redis } from 'ioredis';
import { stringify } from 'yaml';
import type { KubernetesObject } from '@kubernetes/client-node';
import { kubectl } from '../../../cluster/cluster.ts';
import type { Policy } from '../../../api/v1alpha1.ts';
import { installCrds } from '../../../roles/install-crds.ts';
import { testCluster, testKubeConfig, uniqueName, watchUntil } from '../../support/kube.ts';
import { redisUrl } from '../../support/redis.ts';
import {
  deleteRollcallObjects,
  ensureNamespace,
  startRollcall,
  testDb,
  type RollcallProcess,
} from '../../support/rollcall.ts';

const kc = testKubeConfig();
const namespace = 'rollcall-recovery';
const db = testDb();
const apply = (objects: object[]) =>
  kubectl(testCluster(), ['apply', '-f', '-'], objects.map((o) => stringify(o)).join('---\n'));
const policy = (name: string, server: string, module: string) => ({
  apiVersion: 'rollcall.dev/v1alpha1',
  kind: 'Policy',
  metadata: { name },
  spec: {
    policyServer: server,
    module,
    rules: [{ operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['pods'] }],
  },
});
const summaryOf = (p: Policy) =>
  p.status?.observedGeneration === p.metadata.generation ? p.status?.summary : undefined;

/** Resolves when every named policy has the wanted summary for its current generation. */
async function waitAll(names: string[], summary: string, timeoutMs = 90_000): Promise<void> {
  const seen = new Map<string, string | undefined>();
  await watchUntil<Policy & KubernetesObject>(
    kc,
    '/apis/rollcall.dev/v1alpha1/policies',
    (p) => {
      seen.set(p.metadata.name, summaryOf(p));
      return names.every((n) => seen.get(n) === summary);
    },
    { timeoutMs },
  );
}

describe('recovery of rollcall processes', () => {
  const server = uniqueName('rec').slice(0, 40);
  const procs: RollcallProcess[] = [];
  const start = (name: string, args: string[]) => {
    const roleFlags = args[0] === 'sim' ? [] : ['--port', '0', '--job-lock-ms', '2000'];
    const p = startRollcall(name, [...args, '--namespace', namespace, ...roleFlags], { db });
    procs.push(p);
    return p;
  };

  before(async () => {
    await ensureNamespace(kc, namespace);
    await installCrds(kc, { info: () => {} });
    start('recovery-sim', ['sim']);
    apply([
      {
        apiVersion: 'rollcall.dev/v1alpha1',
        kind: 'PolicyServer',
        metadata: { name: server },
        spec: { image: 'sim://policy-server', replicas: 2 },
      },
    ]);
  });

  after(async () => {
    await Promise.all(procs.map((p) => p.stop()));
    await deleteRollcallObjects(kc);
  });

  test('a change made while the watcher is down is reconciled once it is back', async () => {
    const watcher = start('recovery-watcher-1', ['watcher', '--identity', 'w1']);
    start('recovery-worker-1', ['worker']);
    apply([policy('rec-a', server, 'sim://ok')]);
    await waitAll(['rec-a'], 'Ready');

    await watcher.stop();
    apply([policy('rec-a', server, 'sim://fail?message=while+the+watcher+was+down')]);
    start('recovery-watcher-2', ['watcher', '--identity', 'w2']);
    await waitAll(['rec-a'], 'Stalled');
  });

  test('a worker SIGKILLed mid-job loses nothing: its jobs run again on another worker', async () => {
    // One write per second keeps jobs active (waiting for tokens) long enough to kill them mid-run.
    const slow = procs.find((p) => p.name === 'recovery-worker-1')!;
    await slow.stop();
    const throttled = start('recovery-worker-slow', [
      'worker',
      '--write-rate',
      '1',
      '--write-burst',
      '1',
    ]);
    const names = Array.from({ length: 8 }, (_, i) => `rec-b${i}`);
    apply(names.map((n) => policy(n, server, 'sim://ok')));

    const redis = new Redis(`${redisUrl()}/${db}`);
    after(() => redis.quit());
    const deadline = Date.now() + 30_000;
    while ((await redis.llen('rollcall:reconcile:active')) === 0) {
      assert.ok(Date.now() < deadline, 'no job became active');
      await new Promise((r) => setTimeout(r, 50));
    }
    await throttled.kill();
    start('recovery-worker-2', ['worker']);
    await waitAll(names, 'Ready');
  });

  test('when the leading watcher is killed, the standby takes over within the lease duration', async () => {
    const leader = procs.find((p) => p.name === 'recovery-watcher-2')!;
    start('recovery-watcher-3', ['watcher', '--identity', 'w3']);
    await new Promise((r) => setTimeout(r, 1000)); // let the standby start competing
    await leader.kill();
    const killedAt = Date.now();
    apply([policy('rec-c', server, 'sim://ok')]);
    await waitAll(['rec-c'], 'Ready', 60_000);
    assert.ok(
      Date.now() - killedAt < 15_000 + 10_000,
      'took over within the 15 s lease (plus reconcile time)',
    );
  });
});
