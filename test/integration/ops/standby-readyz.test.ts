// A standby watcher that cannot reach the apiserver could not take over from a dead leader:
// its /readyz says so (503 with the reason) instead of passing as an idle standby, and it
// recovers on its own once the apiserver answers.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createConnection, createServer, type Server } from 'node:net';
import { after, test } from 'node:test';
import { freePort } from '../../../tooling/cluster/ports.ts';
import { testKubeConfig } from '../../support/kube.ts';
import { get, waitFor, waitForStatus } from '../../support/poll.ts';
import { startServing, type RollcallProcess } from '../../support/rollcall.ts';

const kc = testKubeConfig();
const namespace = 'rollcall-ops-standby';
let rollcall: RollcallProcess | undefined;
let bridge: Server | undefined;
after(async () => {
  await rollcall?.kill();
  bridge?.close();
});

test('a watcher that cannot reach the apiserver is not ready, says why, stays alive and recovers', async () => {
  // The test cluster's kubeconfig, pointed at a loopback port where nothing listens yet.
  const config = JSON.parse(kc.exportConfig()) as {
    clusters: { cluster: { server: string } }[];
  };
  const apiserver = new URL(kc.getCurrentCluster()!.server);
  const cutOffPort = await freePort();
  for (const c of config.clusters) c.cluster.server = `https://127.0.0.1:${cutOffPort}`;
  const kubeconfig = join(mkdtempSync(join(tmpdir(), 'rollcall-standby-')), 'kubeconfig');
  writeFileSync(kubeconfig, JSON.stringify(config));

  const watcher = await startServing('ops-standby-readyz', 'watcher', namespace, [], {
    KUBECONFIG: kubeconfig,
  });
  rollcall = watcher;
  const readyz = watcher.url('/readyz');
  // Until its Redis connection is up, /readyz reports that instead: wait for the Lease reason.
  const res = await waitFor(
    async () => {
      const r = await get(readyz);
      return r?.status === 503 && r.body.includes('Lease') ? r : undefined;
    },
    20_000,
    '/readyz 503 from the cut-off watcher',
  );
  assert.match(res.body, /standby watcher cannot check the leader Lease: .*ECONNREFUSED/);
  assert.match(res.body, new RegExp(namespace), 'names the Lease it could not read');
  assert.equal((await get(readyz.replace('readyz', 'healthz')))?.status, 200);

  // The apiserver becomes reachable on that port (a TCP bridge): the watcher leads and syncs.
  bridge = createServer((client) => {
    const upstream = createConnection(Number(apiserver.port), apiserver.hostname);
    client.pipe(upstream).pipe(client);
    client.on('error', () => upstream.destroy());
    upstream.on('error', () => client.destroy());
  });
  await new Promise<void>((r) => bridge!.listen(cutOffPort, '127.0.0.1', r));
  const back = await waitForStatus(readyz, 200, 30_000, '/readyz 200 once the apiserver answers');
  assert.match(back.body, /leading watcher: informers synced/);
});
