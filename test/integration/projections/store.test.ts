// The pod projection's layout: a pod says whether its report is absent, valid or invalid, and
// a valid report's entries are kept per pod, so that a policy run reads one entry per pod.
// These tests follow one pod through the watcher's writes (put with the version before,
// remove) and check what the functions read back, and that the writes end where a rebuild
// from the same objects ends.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import type { KubeObject } from '../../../api/kube.ts';
import { POLICY_SERVER_RESOURCE_PREFIX } from '../../../control-plane/functions/policyserver-core.ts';
import { compact, projectPod } from '../../../control-plane/projections/project.ts';
import type { ProjectionStore } from '../../../control-plane/projections/store.ts';
import { aPod, aPolicy, reportOf } from '../../fixtures/builders.ts';
import { freshStores } from '../../support/redis.ts';

const newStore = freshStores('store');
const p1 = aPolicy({ name: 'p1' });
const p2 = aPolicy({ name: 'p2' });
const onOther = aPolicy({ name: 'p3', spec: { policyServer: 'other' } });
const policies = [p1, p2, onOther];

const v1 = projectPod(
  aPod('ps-a', { report: { ...reportOf('p1', 4, 'Loaded'), ...reportOf('p2', 4, 'Loaded') } }),
);
const v2 = projectPod(aPod('ps-a', { report: reportOf('p1', 4, 'Failed', { message: 'boom' }) }));
const v3 = projectPod(aPod('ps-a', { report: '{not json' }));
const moved = projectPod(aPod('ps-a', { server: 'other', report: reportOf('p3', 4, 'Loaded') }));

async function storeWith(...objects: KubeObject[]): Promise<ProjectionStore> {
  const store = newStore();
  await store.replaceAll({ policy: policies.map((p) => compact('policy', p)), pod: objects });
  return store;
}

/** What each Policy's functions read about the pods, and the status page's pods per server. */
async function seen(store: ProjectionStore) {
  const views = await Promise.all(
    policies.map((p) => store.policyView(p.metadata.name, POLICY_SERVER_RESOURCE_PREFIX)),
  );
  return {
    reports: views.map((v) => [...(v?.reports ?? [])]),
    pods: views.map((v) => v?.pods.map((p) => p.metadata?.name)),
    page: await Promise.all(['default', 'other'].map((s) => store.podsOf(s))),
  };
}

describe("a pod's report in the projections", () => {
  test('each Policy reads only its own entry; a Policy the report leaves out reads none', async () => {
    const { reports } = await seen(await storeWith(v2));
    assert.deepEqual(reports[0], [
      [
        'ps-a',
        {
          kind: 'valid',
          entry: { uid: 'uid-pol', generation: 4, state: 'Failed', message: 'boom' },
        },
      ],
    ]);
    assert.deepEqual(reports[1], [['ps-a', { kind: 'valid', entry: undefined }]]);
  });

  test('an invalid report is invalid for every Policy, with its reason, and no entry survives', async () => {
    const store = await storeWith(v1);
    await store.put('pod', v3, v1);
    const { reports, page } = await seen(store);
    for (const r of reports.slice(0, 2)) {
      assert.equal(r[0]?.[1].kind, 'invalid');
      assert.match((r[0]?.[1] as { reason: string }).reason, /not valid JSON/);
    }
    assert.equal(page[0]?.[0]?.report.kind, 'invalid');
  });

  test('a Policy reads its pods by name, whatever order the watcher wrote them in', async () => {
    const loaded = (pod: string) => projectPod(aPod(pod, { report: reportOf('p1', 4, 'Loaded') }));
    const names = ['ps-a', 'ps-b', 'ps-c', 'ps-d', 'ps-e', 'ps-f', 'ps-g', 'ps-h'];
    const store = await storeWith(...names.toReversed().map(loaded));
    assert.deepEqual((await seen(store)).pods[0], names);
  });

  test("the status page reads each pod's whole report back", async () => {
    const { page } = await seen(await storeWith(v1));
    assert.deepEqual(page[0]?.[0]?.report, v1.report);
    assert.equal(page[0]?.[0]?.metadata?.annotations, undefined, 'the annotation is not kept');
  });

  const histories: [string, (store: ProjectionStore) => Promise<void>, KubeObject[]][] = [
    ['an entry flipped', (s) => s.put('pod', v2, v1), [v2]],
    [
      'an entry dropped, then the report broke',
      (s) => s.put('pod', v2, v1).then(() => s.put('pod', v3, v2)),
      [v3],
    ],
    ['the pod relabelled for another server', (s) => s.put('pod', moved, v1), [moved]],
    ['the pod deleted', (s) => s.remove('pod', v1), []],
    ['the pod deleted after a relabel the store never saw', (s) => s.remove('pod', moved, v1), []],
  ];
  for (const [name, history, final] of histories)
    test(`the watcher's writes end where a rebuild ends: ${name}`, async () => {
      const store = await storeWith(v1);
      await history(store);
      assert.deepEqual(await seen(store), await seen(await storeWith(...final)));
    });
});

describe('a status a worker wrote (putWritten)', () => {
  const versioned = (resourceVersion: string, ready: string) =>
    compact('policy', {
      ...aPolicy({ name: 'p1', status: { ready } }),
      metadata: { ...aPolicy({ name: 'p1' }).metadata, resourceVersion },
    }) as KubeObject;
  const version = fc.oneof(fc.constantFrom('41', '42', '042', ''), fc.string({ maxLength: 12 }));

  test('property: stored only over the version it was computed from; any other stays', async () => {
    const store = newStore();
    await fc.assert(
      fc.asyncProperty(version, version, version, async (stored, read, written) => {
        await store.replaceAll({ policy: [versioned(stored, '1/3')] });
        const put = await store.putWritten('policy', versioned(written, '3/3'), read);
        assert.equal(put, stored === read);
        const now = (await store.policyView('p1', POLICY_SERVER_RESOURCE_PREFIX))?.policy;
        assert.equal(now?.status?.ready, put ? '3/3' : '1/3');
        assert.equal(now?.metadata.resourceVersion, put ? written : stored);
      }),
      { numRuns: 200 },
    );
  });
});
