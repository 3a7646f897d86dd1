// The reflector against the real local cluster: events, resume, 410, silence and cut connections.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { ApiextensionsV1Api, CoreV1Api, CustomObjectsApi, type KubernetesObject, type V1ConfigMap } from '@kubernetes/client-node';
import { Reflector, objectKey, type ReflectorOptions } from '../../../watcher/reflector.ts';
import { testKubeConfig, uniqueName } from '../../support/kube.ts';
import { TcpProxy } from './tcp-proxy.ts';

const kc = testKubeConfig();
const core = kc.makeApiClient(CoreV1Api);
const namespace = uniqueName('reflector');
const label = { 'rollcall.dev/test': namespace };
const labelSelector = `rollcall.dev/test=${namespace}`;
const path = `/api/v1/namespaces/${namespace}/configmaps`;

/** A reflector on this test's ConfigMaps that records what it reports as short strings. */
function recorded(options: Partial<ReflectorOptions<V1ConfigMap>> = {}) {
  const events: string[] = [];
  const metrics: string[] = [];
  const reflector = new Reflector<V1ConfigMap>({
    kc,
    path,
    labelSelector,
    backoff: { initialMs: 50, maxMs: 500 },
    onAdd: (o) => void events.push(`add ${o.metadata?.name}`),
    onUpdate: (_, o) => void events.push(`update ${o.metadata?.name} ${JSON.stringify(o.data)}`),
    onDelete: (o, vanished) => void events.push(`delete ${o.metadata?.name}${vanished ? ' (vanished)' : ''}`),
    onSynced: (all) => void events.push(`synced ${all.length}`),
    metrics: {
      watchRestarted: (reason) => void metrics.push(`restart:${reason}`),
      relisted: (reason) => void metrics.push(`relist:${reason}`),
    },
    ...options,
  });
  return { reflector, events, metrics };
}

const createConfigMap = (name: string, data: Record<string, string> = {}) =>
  core.createNamespacedConfigMap({ namespace, body: { metadata: { name, labels: label }, data } });
const deleteConfigMap = (name: string) => core.deleteNamespacedConfigMap({ namespace, name });

async function eventually(check: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

before(async () => {
  await core.createNamespace({ body: { metadata: { name: namespace } } });
});
after(async () => {
  await core.deleteNamespace({ name: namespace });
});

describe('Reflector on the real cluster', () => {
  it('lists existing ConfigMaps, then reports their creation, update and deletion', async () => {
    await createConfigMap('first', { v: '1' });
    const { reflector, events } = recorded();
    reflector.start();
    try {
      await eventually(() => reflector.hasSynced(), 'the first sync');
      assert.deepEqual(events, ['add first', 'synced 1']);
      await createConfigMap('second');
      await core.patchNamespacedConfigMap(
        { namespace, name: 'first', body: [{ op: 'replace', path: '/data/v', value: '2' }] },
      );
      await deleteConfigMap('second');
      await eventually(() => events.length === 5, 'three more events');
      assert.deepEqual(events.slice(2), ['add second', 'update first {"v":"2"}', 'delete second']);
      assert.deepEqual(reflector.list().map(objectKey), [`${namespace}/first`]);
      assert.equal(reflector.get(`${namespace}/first`)?.data?.v, '2');
    } finally {
      await reflector.stop();
      await deleteConfigMap('first');
    }
  });

  it('resumes after stop() from its resourceVersion and sees what changed meanwhile, without relisting', async () => {
    await createConfigMap('kept');
    await createConfigMap('dropped');
    const { reflector, events, metrics } = recorded();
    reflector.start();
    try {
      await eventually(() => reflector.hasSynced(), 'the first sync');
      await reflector.stop();
      await deleteConfigMap('dropped');
      await createConfigMap('added');
      events.length = 0;
      reflector.start();
      await eventually(() => events.length === 2, 'the changes made while stopped');
      assert.deepEqual(events, ['delete dropped', 'add added']);
      assert.deepEqual(metrics, ['relist:initial']);
    } finally {
      await reflector.stop();
      await Promise.all(['kept', 'added'].map(deleteConfigMap));
    }
  });

  it('relists on a real 410 (a resourceVersion the apiserver no longer serves) and reports what vanished', async () => {
    // The apiserver answers a watch from resourceVersion "1" with an ERROR event
    // {code: 410, reason: Expired, "too old resource version"}: its watch cache starts far later.
    await createConfigMap('kept');
    const seed = [{ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'gone-while-away', namespace, resourceVersion: '1' } }];
    const { reflector, events, metrics } = recorded({ resumeFrom: { objects: seed, resourceVersion: '1' } });
    reflector.start();
    try {
      await eventually(() => events.includes('synced 1'), 'the relist');
      assert.deepEqual(events, ['delete gone-while-away (vanished)', 'add kept', 'synced 1']);
      assert.deepEqual(metrics, ['restart:gone', 'relist:gone']);
      await createConfigMap('after');
      await eventually(() => events.includes('add after'), 'an event after the relist');
    } finally {
      await reflector.stop();
      await Promise.all(['kept', 'after'].map(deleteConfigMap));
    }
  });

  it('restarts a watch that went silent and still sees later changes', async () => {
    const { reflector, events, metrics } = recorded({ staleAfterMs: 300 });
    reflector.start();
    try {
      await eventually(() => metrics.filter((m) => m === 'restart:stale').length >= 2, 'two stale restarts');
      await createConfigMap('late');
      await eventually(() => events.includes('add late'), 'the change after the restarts');
      assert.ok(!metrics.includes('relist:gone'), 'a stale watch resumes without relisting');
    } finally {
      await reflector.stop();
      await deleteConfigMap('late');
    }
  });

  it('survives cut connections: retries with backoff while the apiserver is unreachable, then catches up', async () => {
    const { proxy, kc: proxied } = await TcpProxy.inFrontOf(kc);
    const { reflector, events, metrics } = recorded({ kc: proxied });
    reflector.start();
    try {
      await eventually(() => reflector.hasSynced(), 'the first sync');
      proxy.cut({ refuse: true });
      await createConfigMap('while-cut');
      await eventually(() => metrics.filter((m) => m === 'restart:error').length >= 3, 'three failed attempts');
      proxy.restore();
      await eventually(() => events.includes('add while-cut'), 'the change made while cut off', 15_000);
      assert.deepEqual(metrics.filter((m) => m.startsWith('relist')), ['relist:initial'], 'resumed, not relisted');
    } finally {
      await reflector.stop();
      await proxy.close();
      await deleteConfigMap('while-cut');
    }
  });

  it('keeps retrying while its resource does not exist (404) and syncs once the CRD is installed', async () => {
    const group = `${namespace}.rollcall.test`;
    const crdName = `widgets.${group}`;
    const widgets = new Reflector<KubernetesObject>({
      kc,
      path: `/apis/${group}/v1/widgets`,
      backoff: { initialMs: 50, maxMs: 500 },
      metrics: { failed: (stage) => void failures.push(stage) },
    });
    const failures: string[] = [];
    const extensions = kc.makeApiClient(ApiextensionsV1Api);
    widgets.start();
    try {
      await eventually(() => failures.length >= 2, 'failed lists');
      assert.equal(widgets.hasSynced(), false);
      await extensions.createCustomResourceDefinition({
        body: {
          metadata: { name: crdName },
          spec: {
            group,
            scope: 'Cluster',
            names: { plural: 'widgets', singular: 'widget', kind: 'Widget' },
            versions: [{ name: 'v1', served: true, storage: true, schema: { openAPIV3Schema: { type: 'object', x_kubernetes_preserve_unknown_fields: true } } }],
          },
        },
      });
      await eventually(() => widgets.hasSynced(), 'the sync after the CRD appeared', 20_000);
      // Retry until the CRD is served (Established), then the watch must see the object.
      const custom = kc.makeApiClient(CustomObjectsApi);
      const deadline = Date.now() + 10_000;
      for (;;) {
        try {
          await custom.createClusterCustomObject({ group, version: 'v1', plural: 'widgets', body: { apiVersion: `${group}/v1`, kind: 'Widget', metadata: { name: 'w1' } } });
          break;
        } catch (err) {
          if (Date.now() > deadline) throw err;
          await new Promise((resolve) => setTimeout(resolve, 200));
        }
      }
      await eventually(() => widgets.get('w1') !== undefined, 'the widget in the store');
      assert.ok(failures.every((stage) => stage === 'list' || stage === 'watch'));
    } finally {
      await widgets.stop();
      await extensions.deleteCustomResourceDefinition({ name: crdName }).catch(() => {});
    }
  });
});
