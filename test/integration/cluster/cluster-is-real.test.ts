// Proves the local cluster is a real one: controllers, scheduler, kwok and server-side
// behaviour that a fake apiserver would miss.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import {
  ApiextensionsV1Api,
  AppsV1Api,
  CustomObjectsApi,
  PatchStrategy,
  setHeaderOptions,
  type V1CustomResourceDefinition,
  type V1Deployment,
} from '@kubernetes/client-node';
import { kubectl } from '../../../tooling/cluster/cluster.ts';
import { testCluster, testKubeConfig, uniqueName, watchUntil } from '../../support/kube.ts';

const kc = testKubeConfig();

describe('the local cluster', () => {
  test('a Deployment with 2 replicas becomes available on the kwok node', async () => {
    const apps = kc.makeApiClient(AppsV1Api);
    const name = uniqueName('web');
    const labels = { app: name };
    await apps.createNamespacedDeployment({
      namespace: 'default',
      body: {
        metadata: { name },
        spec: {
          replicas: 2,
          selector: { matchLabels: labels },
          template: {
            metadata: { labels },
            spec: { containers: [{ name: 'web', image: 'example.invalid/web:1' }] },
          },
        },
      },
    });
    after(() => apps.deleteNamespacedDeployment({ name, namespace: 'default' }));

    const deployment = await watchUntil<V1Deployment>(
      kc,
      '/apis/apps/v1/namespaces/default/deployments',
      (d) => d.status?.availableReplicas === 2,
      { fieldSelector: `metadata.name=${name}` },
    );
    assert.equal(deployment.status?.readyReplicas, 2);

    // The controller manager made a ReplicaSet and Pods; the scheduler bound them to the fake node.
    const pods = JSON.parse(
      kubectl(testCluster(), ['get', 'pods', '-n', 'default', '-l', `app=${name}`, '-o', 'json']),
    ) as {
      items: { spec: { nodeName?: string }; metadata: { ownerReferences?: { kind: string }[] } }[];
    };
    assert.equal(pods.items.length, 2);
    for (const pod of pods.items) {
      assert.equal(pod.spec.nodeName, 'kwok-node-0');
      assert.equal(pod.metadata.ownerReferences?.[0]?.kind, 'ReplicaSet');
    }
  });

  test('a spec change bumps metadata.generation and a status patch does not', async () => {
    const group = 'probe.rollcall.dev';
    const plural = `widgets${process.pid}`;
    const crdName = `${plural}.${group}`;
    const ext = kc.makeApiClient(ApiextensionsV1Api);
    await ext.createCustomResourceDefinition({
      body: {
        metadata: { name: crdName },
        spec: {
          group,
          scope: 'Cluster',
          names: { plural, singular: `widget${process.pid}`, kind: `Widget${process.pid}` },
          versions: [
            {
              name: 'v1',
              served: true,
              storage: true,
              subresources: { status: {} },
              schema: {
                openAPIV3Schema: {
                  type: 'object',
                  properties: {
                    spec: { type: 'object', properties: { size: { type: 'integer' } } },
                    status: { type: 'object', properties: { phase: { type: 'string' } } },
                  },
                },
              },
            },
          ],
        },
      },
    });
    after(() => ext.deleteCustomResourceDefinition({ name: crdName }));
    await watchUntil<V1CustomResourceDefinition>(
      kc,
      '/apis/apiextensions.k8s.io/v1/customresourcedefinitions',
      (crd) =>
        crd.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True') ??
        false,
      { fieldSelector: `metadata.name=${crdName}` },
    );

    const custom = kc.makeApiClient(CustomObjectsApi);
    const ref = { group, version: 'v1', plural, name: 'one' };
    type Widget = {
      metadata: { generation: number };
      spec: { size: number };
      status?: { phase: string };
    };
    const created = (await custom.createClusterCustomObject({
      ...ref,
      body: {
        apiVersion: `${group}/v1`,
        kind: `Widget${process.pid}`,
        metadata: { name: 'one' },
        spec: { size: 1 },
      },
    })) as Widget;
    assert.equal(created.metadata.generation, 1);

    const merge = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
    const afterStatus = (await custom.patchClusterCustomObjectStatus(
      { ...ref, body: { status: { phase: 'Ready' } } },
      merge,
    )) as Widget;
    assert.equal(afterStatus.status?.phase, 'Ready');
    assert.equal(afterStatus.metadata.generation, 1, 'a status write must not bump generation');

    const afterSpec = (await custom.patchClusterCustomObject(
      { ...ref, body: { spec: { size: 2 } } },
      merge,
    )) as Widget;
    assert.equal(afterSpec.metadata.generation, 2, 'a spec change must bump generation');

    const specIgnoredOnStatus = (await custom.patchClusterCustomObjectStatus(
      { ...ref, body: { spec: { size: 3 } } },
      merge,
    )) as Widget;
    assert.equal(specIgnoredOnStatus.spec.size, 2, 'the status subresource ignores spec');
  });

  test('the built kubectl reports client and server versions', () => {
    const out = kubectl(testCluster(), ['version']);
    assert.match(out, /Client Version: v1\.37\.2/);
    assert.match(out, /Server Version: v1\.37\.2/);
  });
});
