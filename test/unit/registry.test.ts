// The registry (control-plane/registry.ts) against what reads it: the functions' declarations,
// the watcher's watch list, the projections and the watcher's RBAC in deploy/rbac.yaml.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { functions } from '../../control-plane/functions/index.ts';
import type { ReconcileFunction, WatchEvent } from '../../control-plane/functions/types.ts';
import { compact } from '../../control-plane/projections/project.ts';
import { parseKey } from '../../control-plane/queue/index.ts';
import {
  apiGroupOf,
  keysFor,
  watchedKinds,
  watchList,
  WATCHED_KINDS,
  type WatchedKind,
} from '../../control-plane/registry.ts';

const NAMESPACE = 'rollcall-system';
const allKinds = Object.keys(WATCHED_KINDS) as WatchedKind[];
const declared = (fns: readonly ReconcileFunction[]) =>
  new Set(fns.flatMap((f) => f.watches.map((w) => w.kind)));

describe('the watcher watches what the functions declare', () => {
  test("the watch list is the union of the functions' kinds, in the registry's order", () => {
    const union = declared(functions);
    const watched = watchList(functions, NAMESPACE).map((w) => w.kind);
    assert.deepEqual(new Set(watched), union);
    assert.deepEqual(
      watched,
      allKinds.filter((k) => union.has(k)),
    );
  });

  test('every kind of the registry is declared by some function (none watched for nobody)', () => {
    const union = declared(functions);
    assert.deepEqual(
      allKinds.filter((k) => !union.has(k)),
      [],
    );
  });

  test('a kind no function declares is not watched', () => {
    const onlyPolicies: ReconcileFunction = {
      name: 'only-policies',
      watches: [{ kind: 'Policy' }],
      handle: async () => {},
    };
    assert.deepEqual(watchedKinds([onlyPolicies]), ['Policy']);
  });

  test('the watches are the ones rollcall has always run (paths, selectors, projections)', () => {
    assert.deepEqual(
      watchList(functions, NAMESPACE).map(({ kind, path, labelSelector, projection }) => [
        kind,
        path,
        labelSelector,
        projection,
      ]),
      [
        ['PolicyServer', '/apis/rollcall.dev/v1alpha1/policyservers', undefined, 'policyserver'],
        ['Policy', '/apis/rollcall.dev/v1alpha1/policies', undefined, 'policy'],
        [
          'Deployment',
          `/apis/apps/v1/namespaces/${NAMESPACE}/deployments`,
          'rollcall.dev/policy-server',
          'deployment',
        ],
        [
          'ReplicaSet',
          `/apis/apps/v1/namespaces/${NAMESPACE}/replicasets`,
          'rollcall.dev/policy-server',
          'replicaset',
        ],
        ['Pod', `/api/v1/namespaces/${NAMESPACE}/pods`, 'rollcall.dev/policy-server', 'pod'],
        [
          'ValidatingWebhookConfiguration',
          '/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations',
          'app.kubernetes.io/managed-by=rollcall',
          'webhook',
        ],
        ['Namespace', '/api/v1/namespaces', undefined, 'namespace'],
        ['Secret', `/api/v1/namespaces/${NAMESPACE}/secrets`, undefined, 'secret'],
      ],
    );
  });
});

describe('the projections', () => {
  test('each watched kind has its own projection, which keeps its apiVersion and kind', () => {
    const projections = allKinds.map((k) => WATCHED_KINDS[k].projection);
    assert.equal(new Set(projections).size, projections.length);
    for (const kind of allKinds) {
      const projected = compact(WATCHED_KINDS[kind].projection, { metadata: { name: 'x' } });
      assert.deepEqual(
        [(projected as { apiVersion?: string }).apiVersion, (projected as { kind?: string }).kind],
        [WATCHED_KINDS[kind].apiVersion, kind],
      );
    }
  });
});

describe('the keys', () => {
  test('each function has its own key prefix, a valid function name of the queue', () => {
    const names = functions.map((f) => f.name);
    assert.equal(new Set(names).size, names.length);
    for (const name of names) assert.equal(parseKey(`${name}/x`).function, name);
  });

  test('the fan-out is `fan-out/<server>`', () => {
    const event: WatchEvent = {
      kind: 'PolicyServer',
      type: 'added',
      object: { metadata: { name: 'a' } },
    };
    const keys = keysFor(functions, event, { policiesOfServer: () => [] });
    assert.ok(keys.includes('fan-out/a'), keys.join(' '));
    assert.ok(keys.includes('policyserver/a'), keys.join(' '));
  });

  test('a resync of a kind keyed per server gives the same keys for every object of a server', () => {
    const index = {
      policiesOfServer: (s: string) => (s === 'a' ? ['p1', 'p2'] : []),
      serversUsingSecret: () => ['a'],
    };
    const object = (name: string) => ({
      metadata: { name, labels: { 'rollcall.dev/policy-server': 'a' } },
      status: { conditions: [{ type: 'Ready', status: name.endsWith('1') ? 'True' : 'False' }] },
    });
    for (const kind of allKinds.filter((k) => 'keysPerServer' in WATCHED_KINDS[k])) {
      const keysOf = (name: string) =>
        keysFor(functions, { kind, type: 'resync', object: object(name) }, index);
      assert.deepEqual(keysOf('a-1'), keysOf('a-2'), kind);
      assert.notDeepEqual(keysOf('a-1'), [], kind);
    }
  });
});

interface Rule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
  resourceNames?: string[];
}
interface Role {
  kind: string;
  metadata: { name: string; namespace?: string };
  rules?: Rule[];
}

describe("the watcher's RBAC in deploy/rbac.yaml", () => {
  const manifests = parseAllDocuments(
    readFileSync(new URL('../../deploy/rbac.yaml', import.meta.url), 'utf8'),
  ).map((d) => d.toJS() as Role);
  /** `group/resource` the rollcall-watcher account may list and watch: cluster-wide, or in the namespace. */
  const listWatch = (kind: 'ClusterRole' | 'Role') =>
    manifests
      .filter((m) => m.kind === kind && m.metadata.name === 'rollcall-watcher')
      .filter((m) => kind === 'ClusterRole' || m.metadata.namespace === NAMESPACE)
      .flatMap((m) => m.rules ?? [])
      .filter((r) => !r.resourceNames && r.verbs.includes('list') && r.verbs.includes('watch'))
      .flatMap((r) => r.apiGroups.flatMap((g) => r.resources.map((res) => `${g}/${res}`)))
      .sort();
  const wanted = (namespaced: boolean) =>
    watchedKinds(functions)
      .filter((k) => WATCHED_KINDS[k].namespaced === namespaced)
      .map((k) => `${apiGroupOf(k)}/${WATCHED_KINDS[k].resource}`)
      .sort();

  test('the ClusterRole grants list and watch on exactly the cluster-scoped kinds watched', () => {
    assert.deepEqual(listWatch('ClusterRole'), wanted(false));
  });

  test("the Role in rollcall's namespace grants list and watch on exactly the namespaced kinds watched", () => {
    assert.deepEqual(listWatch('Role'), wanted(true));
  });
});
