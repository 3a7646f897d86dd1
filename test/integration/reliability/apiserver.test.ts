// Faults 2 and 5: the kube-apiserver restarts (every watch breaks) and, with etcd compacted
// first, every watch resumes from a resourceVersion that is gone (410): the reflectors must
// relist and rollcall must catch up with what changed meanwhile.
import assert from 'node:assert/strict';
import { afterEach, test } from 'node:test';
import { freePort } from '../../../tooling/cluster/ports.ts';
import { testCluster } from '../../support/kube.ts';
import { faultScenario } from '../../support/driver.ts';
import { apiserverReady } from '../../../tooling/cluster/cluster.ts';
import { compactEtcd, restartApiserver } from '../../support/faults.ts';
import { metric } from '../../support/prom-text.ts';

afterEach(async () => {
  // Whatever happened, later test files need a serving apiserver.
  assert.ok(await apiserverReady(testCluster()), 'the apiserver is serving after the test');
});

test(
  'an apiserver restart mid-storm: watches break, relist, and the end state matches',
  { timeout: 150_000 },
  async () => {
    const { s, procs } = await faultScenario('rel-apiserver');
    await s.storm(8);
    await restartApiserver(testCluster());
    await s.storm(6, 50, { policiesOnly: true });
    await s.converge(75_000);
    await procs.stopAll();
  },
);

test(
  'etcd compacted and watches reconnected: every reflector gets 410 Gone and relists',
  { timeout: 150_000 },
  async () => {
    const port = await freePort();
    const { s } = await faultScenario('rel-gone', { runArgs: ['--port', String(port)] });
    await s.storm(6);
    await s.converge(60_000);
    const relists = async () =>
      (await metric(port, 'rollcall_watch_relists_total', { reason: 'gone' })) +
      (await metric(port, 'rollcall_watch_relists_total', { reason: 'initial' }));
    const before = await relists();
    await s.storm(4);
    // Compact to the current revision, then restart the apiserver: its new watch cache starts
    // there, so a watch resuming from an older resourceVersion is answered 410 Gone and
    // relists; every watch must list again, counted below.
    await compactEtcd(testCluster());
    await restartApiserver(testCluster());
    await s.storm(4, 50, { policiesOnly: true });
    await s.converge(75_000);
    const relisted = (await relists()) - before;
    assert.ok(
      relisted >= 3,
      `expected the watches to list again after compaction and restart, got ${relisted} relists`,
    );
  },
);
