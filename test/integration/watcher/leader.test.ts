// Leader election on a real Lease: one leads, a release hands over at once, a crash after expiry.
import assert from 'node:assert/strict';
import { after, afterEach, before, describe, test } from 'node:test';
import { CoordinationV1Api, CoreV1Api, V1MicroTime } from '@kubernetes/client-node';
import type { KubeConfig } from '@kubernetes/client-node';
import { LeaderElector } from '../../../control-plane/watcher/leader.ts';
import { testKubeConfig, uniqueName } from '../../support/kube.ts';
import { eventually } from '../../support/poll.ts';
import { TcpProxy } from './tcp-proxy.ts';
import { kubeConfigTarget } from '../../../lib/kube/api.ts';

const kc = testKubeConfig();
const core = kc.makeApiClient(CoreV1Api);
const coordination = kc.makeApiClient(CoordinationV1Api);
const namespace = uniqueName('leader');
const electors: LeaderElector[] = [];

/** A candidate with short timings that records when it started and stopped leading. */
function candidate(identity: string, leaseName: string, config: KubeConfig = kc) {
  const record = { identity, startedAt: 0, stoppedAt: 0 };
  const elector = new LeaderElector({
    api: kubeConfigTarget(config),
    namespace,
    name: leaseName,
    identity,
    leaseDurationSeconds: 3,
    renewEveryMs: 300,
    onStartedLeading: () => void (record.startedAt = Date.now()),
    onStoppedLeading: () => void (record.stoppedAt = Date.now()),
  });
  electors.push(elector);
  return Object.assign(record, { elector });
}

/** Candidate `a` (on `aConfig`) leading, then candidate `b` started as its standby. */
async function leaderAndStandby(lease: string, aConfig: KubeConfig = kc) {
  const a = candidate('a', lease, aConfig);
  a.elector.start();
  await eventually('a to lead', () => a.elector.isLeader());
  const b = candidate('b', lease);
  b.elector.start();
  return { a, b };
}

const holderOf = async (name: string) =>
  (await coordination.readNamespacedLease({ namespace, name })).spec?.holderIdentity;

before(async () => {
  await core.createNamespace({ body: { metadata: { name: namespace } } });
});
afterEach(async () => {
  await Promise.all(electors.splice(0).map((e) => e.stop({ release: false })));
});
after(async () => {
  await core.deleteNamespace({ name: namespace });
});

describe('LeaderElector on the real cluster', () => {
  test('lets exactly one of two candidates lead, and the Lease names it', async () => {
    const lease = uniqueName('lease');
    const [a, b] = [candidate('a', lease), candidate('b', lease)];
    a.elector.start();
    b.elector.start();
    await eventually('a leader', () => a.elector.isLeader() || b.elector.isLeader());
    await new Promise((resolve) => setTimeout(resolve, 1_000)); // a few renew periods: still exactly one
    assert.equal(Number(a.elector.isLeader()) + Number(b.elector.isLeader()), 1);
    const leader = a.elector.isLeader() ? 'a' : 'b';
    assert.equal(await holderOf(lease), leader);
  });

  test('hands over at once when the leader stops: it releases the lease', async () => {
    const lease = uniqueName('lease');
    const { a, b } = await leaderAndStandby(lease);
    await a.elector.stop();
    assert.ok(a.stoppedAt > 0, 'onStoppedLeading ran');
    // Released: empty, or already taken by b, which may have polled in between.
    assert.notEqual(await holderOf(lease), 'a', 'the lease was released');
    await eventually('b to lead', () => b.elector.isLeader(), 2_000);
    assert.ok(b.startedAt - a.stoppedAt < 1_000, `took over after ${b.startedAt - a.stoppedAt} ms`);
  });

  test('lets the standby take over within the lease duration when the leader dies without releasing', async () => {
    const lease = uniqueName('lease');
    const { a, b } = await leaderAndStandby(lease);
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.equal(b.elector.isLeader(), false, 'b waits while a renews');
    const diedAt = Date.now();
    await a.elector.stop({ release: false }); // a crash: no release
    await eventually('b to lead', () => b.elector.isLeader(), 6_000);
    const waited = b.startedAt - diedAt;
    // The lease was renewed at most one renew period before the crash and lasts 3 s.
    assert.ok(waited >= 2_500 && waited <= 3_000 + 2 * 360 + 500, `took over after ${waited} ms`);
    assert.equal(await holderOf(lease), 'b');
  });

  test('steps down when another candidate holds the lease', async () => {
    const lease = uniqueName('lease');
    const a = candidate('a', lease);
    a.elector.start();
    await eventually('a to lead', () => a.elector.isLeader());
    const current = await coordination.readNamespacedLease({ namespace, name: lease });
    await coordination.replaceNamespacedLease({
      namespace,
      name: lease,
      body: {
        ...current,
        spec: { ...current.spec, holderIdentity: 'intruder', renewTime: new V1MicroTime() },
      },
    });
    await eventually('a to step down', () => !a.elector.isLeader(), 2_000);
    assert.ok(a.stoppedAt > 0);
  });

  test('steps down before its lease expires when it cannot reach the apiserver, so leaders never overlap', async () => {
    const lease = uniqueName('lease');
    const { proxy, kc: proxied } = await TcpProxy.inFrontOf(kc);
    try {
      const { a, b } = await leaderAndStandby(lease, proxied);
      const cutAt = Date.now();
      proxy.cut({ refuse: true });
      await eventually('b to lead', () => b.elector.isLeader(), 8_000);
      assert.ok(a.stoppedAt > 0 && a.stoppedAt < b.startedAt, 'a stepped down before b started');
      assert.ok(
        a.stoppedAt - cutAt <= 2_000 + 100,
        `a stepped down ${a.stoppedAt - cutAt} ms after the cut (renew deadline 2 s)`,
      );
    } finally {
      await proxy.close();
    }
  });
});
