// The reflector against the real local cluster: events, resume, 410, silence and cut connections.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  ApiextensionsV1Api,
  CoreV1Api,
  CustomObjectsApi,
  type KubernetesObject,
  type V1ConfigMap,
} from '@kubernetes/client-node';
import { Reflector, objectKey, type ReflectorOptions } from '../../../lib/kube/reflector.ts';
import { testKubeConfig, uniqueName } from '../../support/kube.ts';
import { eventually } from '../../support/poll.ts';
import { TcpProxy } from './tcp-proxy.ts';
import { kubeConfigTarget } from '../../../lib/kube/api.ts';

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
    api: kubeConfigTarget(kc),
    path,
    labelSelector,
    backoff: { baseMs: 50, capMs: 500 },
    onAdd: (o) => void events.push(`add ${o.metadata?.name}`),
    onUpdate: (_, o) => void events.push(`update ${o.metadata?.name} ${JSON.stringify(o.data)}`),
    onDelete: (o, vanished) =>
      void events.push(`delete ${o.metadata?.name}${vanished ? ' (vanished)' : ''}`),
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

/** Installs a cluster-scoped Widget CRD in a group of its own and waits until it is served. */
async function installWidgetCrd(group = `${uniqueName('w')}.rollcall.test`) {
  const extensions = kc.makeApiClient(ApiextensionsV1Api);
  const custom = kc.makeApiClient(CustomObjectsApi);
  const name = `widgets.${group}`;
  await extensions.createCustomResourceDefinition({
    body: {
      metadata: { name },
      spec: {
        group,
        scope: 'Cluster',
        names: { plural: 'widgets', singular: 'widget', kind: 'Widget' },
        versions: [
          {
            name: 'v1',
            served: true,
            storage: true,
            schema: {
              openAPIV3Schema: { type: 'object', x_kubernetes_preserve_unknown_fields: true },
            },
          },
        ],
      },
    },
  });
  const create = async (widget: string) => {
    // Right after Established the resource may still 404 for a moment.
    for (let attempt = 0; ; attempt++) {
      try {
        return await custom.createClusterCustomObject({
          group,
          version: 'v1',
          plural: 'widgets',
          body: { apiVersion: `${group}/v1`, kind: 'Widget', metadata: { name: widget } },
        });
      } catch (err) {
        if (attempt >= 50) throw err;
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    }
  };
  for (let attempt = 0; ; attempt++) {
    const crd = await extensions.readCustomResourceDefinition({ name });
    if (crd.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True')) break;
    if (attempt >= 100) throw new Error(`CRD ${name} not established`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return {
    group,
    path: `/apis/${group}/v1/widgets`,
    create,
    uninstall: () =>
      extensions.deleteCustomResourceDefinition({ name }).then(
        () => undefined,
        () => undefined,
      ),
  };
}

before(async () => {
  await core.createNamespace({ body: { metadata: { name: namespace } } });
});
after(async () => {
  await core.deleteNamespace({ name: namespace });
});

describe('Reflector on the real cluster', () => {
  test('lists existing ConfigMaps, then reports their creation, update and deletion', async () => {
    await createConfigMap('first', { v: '1' });
    const { reflector, events } = recorded();
    reflector.start();
    try {
      await eventually('the first sync', () => reflector.hasSynced());
      assert.deepEqual(events, ['add first', 'synced 1']);
      await createConfigMap('second');
      await core.patchNamespacedConfigMap({
        namespace,
        name: 'first',
        body: [{ op: 'replace', path: '/data/v', value: '2' }],
      });
      await deleteConfigMap('second');
      await eventually('three more events', () => events.length === 5);
      assert.deepEqual(events.slice(2), ['add second', 'update first {"v":"2"}', 'delete second']);
      assert.deepEqual(reflector.list().map(objectKey), [`${namespace}/first`]);
      assert.equal(reflector.get(`${namespace}/first`)?.data?.v, '2');
    } finally {
      await reflector.stop();
      await deleteConfigMap('first');
    }
  });

  test('resumes after stop() from its resourceVersion and sees what changed meanwhile, without relisting', async () => {
    await createConfigMap('kept');
    await createConfigMap('dropped');
    const { reflector, events, metrics } = recorded();
    reflector.start();
    try {
      await eventually('the first sync', () => reflector.hasSynced());
      await reflector.stop();
      await deleteConfigMap('dropped');
      await createConfigMap('added');
      events.length = 0;
      reflector.start();
      await eventually('the changes made while stopped', () => events.length === 2);
      assert.deepEqual(events, ['delete dropped', 'add added']);
      assert.deepEqual(metrics, ['relist:initial']);
    } finally {
      await reflector.stop();
      await Promise.all(['kept', 'added'].map(deleteConfigMap));
    }
  });

  test('relists on a real 410 (a resourceVersion older than the apiserver’s watch cache) and reports what vanished', async () => {
    // A watch cache starts at the etcd revision of its creation and answers older versions
    // with an ERROR event {code: 410, reason: Expired, "too old resource version: 1 (N)"}.
    // Built-in types' caches start when the apiserver does, on a fresh cluster near revision 1,
    // so "1" may still be served there; a new CRD's cache starts now, so "1" is reliably too old.
    // This is what a client sees when it resumes after an apiserver restart.
    const widgets = await installWidgetCrd();
    try {
      await widgets.create('kept');
      const seed = [
        {
          apiVersion: `${widgets.group}/v1`,
          kind: 'Widget',
          metadata: { name: 'gone-while-away', resourceVersion: '1' },
        },
      ];
      const { reflector, events, metrics } = recorded({
        path: widgets.path,
        labelSelector: undefined,
        resumeFrom: { objects: seed, resourceVersion: '1' },
      });
      reflector.start();
      try {
        await eventually('the relist', () => events.includes('synced 1'));
        assert.deepEqual(events, ['delete gone-while-away (vanished)', 'add kept', 'synced 1']);
        // A cache that is still initialising answers 429 first: that is a (retried) error.
        assert.deepEqual(
          metrics.filter((m) => m !== 'restart:error'),
          ['restart:gone', 'relist:gone'],
        );
        await widgets.create('after');
        await eventually('an event after the relist', () => events.includes('add after'));
      } finally {
        await reflector.stop();
      }
    } finally {
      await widgets.uninstall();
    }
  });

  test('restarts a watch that went silent and still sees later changes', async () => {
    const { reflector, events, metrics } = recorded({ staleAfterMs: 300 });
    reflector.start();
    try {
      await eventually(
        'two stale restarts',
        () => metrics.filter((m) => m === 'restart:stale').length >= 2,
      );
      await createConfigMap('late');
      await eventually('the change after the restarts', () => events.includes('add late'));
      assert.ok(!metrics.includes('relist:gone'), 'a stale watch resumes without relisting');
    } finally {
      await reflector.stop();
      await deleteConfigMap('late');
    }
  });

  test('survives cut connections: retries with backoff while the apiserver is unreachable, then catches up', async () => {
    const { proxy, kc: proxied } = await TcpProxy.inFrontOf(kc);
    const { reflector, events, metrics } = recorded({ api: kubeConfigTarget(proxied) });
    reflector.start();
    try {
      await eventually('the first sync', () => reflector.hasSynced());
      proxy.cut({ refuse: true });
      await createConfigMap('while-cut');
      await eventually(
        'three failed attempts',
        () => metrics.filter((m) => m === 'restart:error').length >= 3,
      );
      proxy.restore();
      await eventually(
        'the change made while cut off',
        () => events.includes('add while-cut'),
        15_000,
      );
      assert.deepEqual(
        metrics.filter((m) => m.startsWith('relist')),
        ['relist:initial'],
        'resumed, not relisted',
      );
    } finally {
      await reflector.stop();
      await proxy.close();
      await deleteConfigMap('while-cut');
    }
  });

  test('keeps retrying while its resource does not exist (404) and syncs once the CRD is installed', async () => {
    const failures: string[] = [];
    const group = `late-${namespace}.rollcall.test`;
    const widgets = new Reflector<KubernetesObject>({
      api: kubeConfigTarget(kc),
      path: `/apis/${group}/v1/widgets`,
      backoff: { baseMs: 50, capMs: 500 },
      metrics: { failed: (stage) => void failures.push(stage) },
    });
    widgets.start();
    let crd: Awaited<ReturnType<typeof installWidgetCrd>> | undefined;
    try {
      await eventually('failed lists', () => failures.length >= 2);
      assert.equal(widgets.hasSynced(), false);
      crd = await installWidgetCrd(group);
      await eventually('the sync after the CRD appeared', () => widgets.hasSynced(), 20_000);
      await crd.create('w1');
      await eventually('the widget in the store', () => widgets.get('w1') !== undefined);
      assert.ok(
        failures.every((stage) => stage === 'list'),
        `failures: ${failures.join(', ')}`,
      );
    } finally {
      await widgets.stop();
      await crd?.uninstall();
    }
  });
});
