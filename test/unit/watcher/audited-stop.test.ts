// The audit's watches stop with the watcher, even when stop() comes while discovery is still
// answering: a watch started after it would keep a terminating process alive (found by CI: a
// watcher that logged "stopped" and never exited).
import assert from 'node:assert/strict';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import { pino } from 'pino';
import type { Policy } from '../../../api/v1alpha1.ts';
import { credentialsTarget } from '../../../lib/kube/api.ts';
import { AuditWatch } from '../../../control-plane/watcher/audited.ts';

const requests: string[] = [];
let releaseDiscovery: () => void = () => {};
const discoveryAsked = Promise.withResolvers<void>();
const held = new Set<ServerResponse>();
const server = createServer((req, res) => {
  const path = (req.url ?? '').split('?')[0]!;
  requests.push(path);
  const json = (body: unknown) =>
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  if (path === '/api/v1') {
    discoveryAsked.resolve();
    releaseDiscovery = () =>
      json({
        resources: [
          { name: 'configmaps', kind: 'ConfigMap', namespaced: true, verbs: ['list', 'watch'] },
        ],
      });
  } else if (path === '/apis') json({ groups: [] });
  else held.add(res); // a list or a watch: left open, as a slow apiserver would
});

before(() => new Promise<void>((r) => server.listen(0, '127.0.0.1', r)));
after(() => {
  for (const res of held) res.destroy();
  server.closeAllConnections();
  server.close();
});

const policy = {
  apiVersion: 'rollcall.dev/v1alpha1',
  kind: 'Policy',
  metadata: { name: 'audits-configmaps', uid: 'u1', generation: 1 },
  spec: {
    policyServer: 'default',
    validationActions: ['Audit'],
    rules: [
      { apiGroups: [''], apiVersions: ['v1'], resources: ['configmaps'], operations: ['CREATE'] },
    ],
  },
  status: { servedGeneration: 1 },
} as unknown as Policy;

test('a stop() during discovery leaves no audit watch behind', async () => {
  const port = (server.address() as AddressInfo).port;
  const watch = new AuditWatch({
    api: credentialsTarget({ server: `http://127.0.0.1:${port}` }),
    // Never reached: nothing is watched, so nothing is written or enqueued.
    store: {} as never,
    queue: {} as never,
    logger: pino({ level: 'silent' }),
  });
  watch.policyChanged(policy.metadata.name, policy);
  await discoveryAsked.promise;
  await watch.stop();
  releaseDiscovery();
  await new Promise((r) => setTimeout(r, 500));
  assert.deepEqual(
    requests.filter((p) => p.includes('configmaps')),
    [],
    'no list or watch of configmaps after stop()',
  );
  assert.ok(requests.includes('/api/v1'), 'discovery was asked (the race was reached)');
});
