// Fault 8: pods that carry a server's label but are not its Deployment's (no owner, or owned
// by a look-alike ReplicaSet) publish failing reports. They must not count at all.
import { AppsV1Api, CoreV1Api, CustomObjectsApi, type V1Pod } from '@kubernetes/client-node';
import { after, test } from 'node:test';
import { faultScenario } from '../../support/driver.ts';

const namespace = 'rel-spoof';

test(
  'pods with the right label but the wrong owner are ignored',
  { timeout: 120_000 },
  async () => {
    const { s } = await faultScenario(namespace);
    const core = s.kc.makeApiClient(CoreV1Api);
    const apps = s.kc.makeApiClient(AppsV1Api);
    after(async () => {
      await core
        .deleteCollectionNamespacedPod({ namespace, labelSelector: 'rel-spoof=true' })
        .catch(() => {});
      await apps
        .deleteCollectionNamespacedReplicaSet({ namespace, labelSelector: 'rel-spoof=true' })
        .catch(() => {});
    });
    await s.storm(6);
    const [server] = [...s.model.servers.keys()];
    const labels = { 'rollcall.dev/policy-server': server!, 'rel-spoof': 'true' };
    // A look-alike ReplicaSet: right labels, right namespace, but not controlled by the Deployment.
    const rs = await apps.createNamespacedReplicaSet({
      namespace,
      body: {
        metadata: { name: 'rel-spoof-rs', labels },
        spec: {
          replicas: 0,
          selector: { matchLabels: { 'rel-spoof-never': 'x' } },
          template: {
            metadata: { labels: { 'rel-spoof-never': 'x' } },
            spec: { containers: [{ name: 'x', image: 'sim://policy-server' }] },
          },
        },
      },
    });
    // Every policy failed at its current generation, with its real uid (a well-formed report
    // that would stall every policy if it counted), in the report of each spoofed pod.
    const live = (await s.kc.makeApiClient(CustomObjectsApi).listClusterCustomObject({
      group: 'rollcall.dev',
      version: 'v1alpha1',
      plural: 'policies',
    })) as { items: { metadata: { name: string; uid: string } }[] };
    const uids = new Map(live.items.map((p) => [p.metadata.name, p.metadata.uid]));
    const lie = JSON.stringify(
      Object.fromEntries(
        [...s.model.policies].map(([name, p]) => [
          name,
          { uid: uids.get(name), generation: p.generation, state: 'Failed', message: 'spoofed' },
        ]),
      ),
    );
    const spoof = (name: string, owned: boolean): V1Pod => ({
      metadata: {
        name,
        labels,
        annotations: { 'rollcall.dev/policies': lie },
        ...(owned
          ? {
              ownerReferences: [
                {
                  apiVersion: 'apps/v1',
                  kind: 'ReplicaSet',
                  name: 'rel-spoof-rs',
                  uid: rs.metadata!.uid!,
                  controller: true,
                },
              ],
            }
          : {}),
      },
      // Never Ready (kwok skips this image), so the simulator leaves the lie in place.
      spec: { containers: [{ name: 'x', image: 'sim://never-ready' }] },
    });
    await core.createNamespacedPod({ namespace, body: spoof('rel-spoof-orphan', false) });
    await core.createNamespacedPod({ namespace, body: spoof('rel-spoof-owned', true) });
    await s.converge(60_000);
  },
);
