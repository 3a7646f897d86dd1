// rollcall's API clients share one connection pool (lib/kube/kube-config.ts). client-node alone
// opens a new TLS connection per request; the first case proves the counter can see that,
// the second that rollcall's kubeconfig does not. Connections are counted by undici itself.
import assert from 'node:assert/strict';
import dc from 'node:diagnostics_channel';
import { after, describe, test } from 'node:test';
import { CustomObjectsApi, KubeConfig } from '@kubernetes/client-node';
import { loadKubeConfig } from '../../../lib/kube/kube-config.ts';
import { testCluster } from '../../support/kube.ts';

let connections = 0;
const count = () => connections++;
dc.subscribe('undici:client:connected', count);
after(() => dc.unsubscribe('undici:client:connected', count));

async function connectionsFor(kc: KubeConfig, requests: number): Promise<number> {
  const api = kc.makeApiClient(CustomObjectsApi);
  const before = connections;
  for (let i = 0; i < requests; i++)
    await api.listClusterCustomObject({
      group: 'apiextensions.k8s.io',
      version: 'v1',
      plural: 'customresourcedefinitions',
      limit: 1,
    });
  return connections - before;
}

describe('API client connections', () => {
  test('client-node as shipped opens one connection per request (what the pool avoids)', async () => {
    const kc = new KubeConfig();
    kc.loadFromFile(testCluster().kubeconfig);
    assert.equal(
      await connectionsFor(kc, 10),
      10,
      'client-node now pools connections itself: lib/kube/kube-config.ts can go',
    );
  });

  test("rollcall's kubeconfig reuses one connection for every request", async () => {
    const kc = loadKubeConfig(testCluster().kubeconfig);
    assert.equal(await connectionsFor(kc, 10), 1);
  });
});
