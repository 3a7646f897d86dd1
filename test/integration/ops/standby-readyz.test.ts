// A standby watcher that cannot reach the apiserver could not take over from a dead leader:
// its /readyz says so (503 with the reason) instead of passing as an idle standby, and it
// recovers on its own once the apiserver answers.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createConnection, createServer, type Server } from 'node:net';
import { after, test } from 'node:test';
import { installCrds } from '../../../roles/install-crds.ts';
import { testKubeConfig } from '../../support/kube.ts';
import {
  ensureNamespace,
  startRollcall,
  testDb,
  type RollcallProcess,
} from '../../support/rollcall.ts';
import { freePort, get, waitForStatus } from './support.ts';

const kc = testKubeConfig();
const namespace = 'rollcall-ops-standby';
let rollcall: RollcallProcess | undefined;
let bridge: Server | undefined;
after(async () => {
  await rollcall?.kill();
  bridge?.close();
});

test('a watcher that cannot reach the apiserver is not ready, says why, stays alive and recovers', async () => {
  await ensureNamespace(kc, namespace);
  await installCrds(kc, { info: () => {} });
  // The test cluster's kubeconfig, pointed at a loopback port where nothing listens yet.
  const config = JSON.parse(kc.exportConfig()) as {
    clusters: { cluster: { server: string } }[];
  };
  const apiserver = new URL(kc.getCurrentCluster()!.server);
  const cutOffPort = await freePort();
  for (const c of config.clusters) c.cluster.server = `https://127.0.0.1:${cutOffPort}`;
  const kubeconfig = join(mkdtempSync(join(tmpdir(), 'rollcall-standby-')), 'kubeconfig');
  writeFileSync(kubeconfig, JSON.stringify(config));

  const port = await freePort();
  rollcall = startRollcall(
    'ops-standby-readyz',
    ['watcher', '--namespace', namespace, '--port', String(port)],
    { db: testDb(), env: { KUBECONFIG: kubeconfig } },
  );
  const readyz = `http://127.0.0.1:${port}/readyz`;
  const res = await waitForStatus(readyz, 503, 20_000, '/readyz 503 from the cut-off watcher');
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
