// Fault 4: the leader watcher is SIGKILLed (no Lease release). The standby must take over
// once the Lease expires (15 s) and pick up what changed meanwhile.
import assert from 'node:assert/strict';
import { CoordinationV1Api } from '@kubernetes/client-node';
import { after, test } from 'node:test';
import { testKubeConfig } from '../../support/kube.ts';
import { Processes, Scenario, seedFromEnv } from '../../support/driver.ts';

const kc = testKubeConfig();
const namespace = 'rel-leader';

test(
  'the standby watcher takes over from a SIGKILLed leader within the Lease duration',
  { timeout: 120_000 },
  async () => {
    const procs = new Processes(namespace);
    await procs.prepare();
    after(() => procs.cleanUp());
    const s = new Scenario(kc, namespace, seedFromEnv());
    const watchers = { a: procs.watcher('rel-a'), b: procs.watcher('rel-b') };
    procs.worker();
    procs.sim();
    await s.setup(2);
    await s.storm(6);
    await s.converge(60_000);

    const leases = kc.makeApiClient(CoordinationV1Api);
    const holder = (await leases.readNamespacedLease({ name: 'rollcall-watcher', namespace })).spec
      ?.holderIdentity;
    assert.ok(holder === 'rel-a' || holder === 'rel-b', `unexpected holder ${holder}`);
    await watchers[holder === 'rel-a' ? 'a' : 'b'].kill();
    const killedAt = Date.now();
    // Nobody watches now: only the standby can notice these. The new Policy makes sure there
    // is something to notice (a storm of no-op scales and deletes would converge without it).
    await s.storm(6);
    await s.createPolicy();
    // Lease duration (15 s) + a full relist and reconcile.
    await s.converge(45_000);
    const now = (await leases.readNamespacedLease({ name: 'rollcall-watcher', namespace })).spec
      ?.holderIdentity;
    assert.equal(now, holder === 'rel-a' ? 'rel-b' : 'rel-a');
    assert.ok(Date.now() - killedAt < 45_000);
  },
);
