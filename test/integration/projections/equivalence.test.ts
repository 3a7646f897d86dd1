// The projection layer keeps only what the pure cores read. These tests put full objects (as
// the apiserver sends them) through the real ProjectionStore (on the run's Redis) and check
// that every core decides the same from the projected objects as from the full ones, over the
// fixture builders' scenarios; and that the scenarios notice any kept field going missing, so a
// compaction that drops a field a core reads fails here, not in production.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { Deployment, ExistingWebhook, Pod, ReplicaSet } from '../../../api/kube.ts';
import type { Policy, PolicyServer } from '../../../api/v1alpha1.ts';
import { computePolicy } from '../../../control-plane/functions/policy-core.ts';
import {
  planPolicyServer,
  POLICY_SERVER_RESOURCE_PREFIX,
  policyServerResourceName,
} from '../../../control-plane/functions/policyserver-core.ts';
import {
  buildWebhookConfiguration,
  planWebhook,
  servedGenerationOf,
} from '../../../control-plane/functions/webhook-core.ts';
import { reportsFromPods, type PolicyReport } from '../../../api/report.ts';
import { compact } from '../../../control-plane/projections/project.ts';
import type { ProjectedKind } from '../../../control-plane/registry.ts';
import { freshStores } from '../../support/redis.ts';
import {
  aDeployment,
  aPod,
  aPolicy,
  aReplicaSet,
  aServerWithDeployment,
  NAMESPACE,
  NOW,
  reportOf,
  threePods,
} from '../../fixtures/builders.ts';

// ------------------------------------------------------------ full objects

/** What the apiserver adds to every object, and the cores never read. */
const apiserverMeta = (generation?: number) => ({
  resourceVersion: '812',
  // client-node hands out Dates, a JSON watch strings: the projections must not care.
  creationTimestamp: new Date('2024-05-01T11:00:00Z'),
  managedFields: [{ manager: 'kubectl', operation: 'Apply', fieldsType: 'FieldsV1' }],
  ...(generation === undefined ? {} : { generation }),
});

function fullPolicy(policy: Policy): Policy {
  return {
    ...policy,
    metadata: {
      ...apiserverMeta(),
      creationTimestamp: '2024-05-01T11:00:00Z',
      ...policy.metadata,
      annotations: { 'kubectl.kubernetes.io/last-applied-configuration': '{}' },
    },
  };
}

function fullServer(server: PolicyServer): PolicyServer {
  return {
    ...server,
    metadata: { ...apiserverMeta(), creationTimestamp: '2024-05-01T11:00:00Z', ...server.metadata },
  };
}

function fullDeployment(
  deployment: Deployment,
  status: NonNullable<Deployment['status']>,
  extra: { terminating?: boolean } = {},
): Deployment {
  return {
    ...deployment,
    metadata: {
      ...apiserverMeta(),
      ...deployment.metadata,
      labels: { 'rollcall.dev/policy-server': 'default' },
      annotations: {
        'deployment.kubernetes.io/revision': '3',
        'rollcall.dev/applied-hash': 'abc123',
      },
      ...(extra.terminating ? { deletionTimestamp: new Date('2024-05-01T11:59:00Z') } : {}),
    },
    spec: {
      ...deployment.spec,
      progressDeadlineSeconds: 600,
      selector: { matchLabels: { 'rollcall.dev/policy-server': 'default' } },
      strategy: { type: 'RollingUpdate' },
      template: {
        metadata: { labels: { 'rollcall.dev/policy-server': 'default' } },
        spec: {
          containers: (deployment.spec?.template?.spec?.containers ?? []).map((c) => ({
            ...c,
            args: ['policy-server', '--port=8443'],
            ports: [{ containerPort: 8443 }],
          })),
        },
      },
    } as Deployment['spec'],
    status,
  };
}

function fullReplicaSet(rs: ReplicaSet): ReplicaSet {
  return {
    ...rs,
    metadata: { ...apiserverMeta(), ...rs.metadata, labels: { 'pod-template-hash': '7d9f' } },
    spec: { replicas: 3, selector: { matchLabels: { 'pod-template-hash': '7d9f' } } },
    status: { replicas: 3, readyReplicas: 3 },
  } as ReplicaSet;
}

function fullPod(pod: Pod): Pod {
  const ready = pod.status?.conditions?.find((c) => c.type === 'Ready')?.status ?? 'False';
  return {
    ...pod,
    metadata: {
      ...apiserverMeta(),
      ...pod.metadata,
      labels: { ...pod.metadata?.labels, 'pod-template-hash': '7d9f' },
      annotations: { ...pod.metadata?.annotations, 'kubectl.kubernetes.io/restartedAt': 'x' },
    },
    spec: { nodeName: 'kwok-node-0', containers: [{ name: 'policy-server', image: 'x' }] },
    status: {
      ...pod.status,
      podIP: '10.0.0.7',
      conditions: [
        { type: 'PodScheduled', status: 'True' },
        { type: 'Initialized', status: 'True' },
        { type: 'ContainersReady', status: ready },
        ...(pod.status?.conditions ?? []),
      ],
      containerStatuses: [{ name: 'policy-server', ready: ready === 'True', restartCount: 0 }],
    },
  } as Pod;
}

const available = (replicas: number, generation = 1): NonNullable<Deployment['status']> => ({
  observedGeneration: generation,
  replicas,
  updatedReplicas: replicas,
  readyReplicas: replicas,
  availableReplicas: replicas,
  conditions: [
    { type: 'Available', status: 'True', reason: 'MinimumReplicasAvailable' },
    { type: 'Progressing', status: 'True', reason: 'NewReplicaSetAvailable' },
  ],
});

// ------------------------------------------------------------ scenarios

interface World {
  policy: Policy;
  policyServer: PolicyServer;
  deployment: Deployment | undefined;
  replicaSets: ReplicaSet[];
  pods: Pod[];
  /** What each pod reports about the Policy; read from the pods' annotations if not given. */
  reports?: ReadonlyMap<string, PolicyReport>;
  webhook: ExistingWebhook | undefined;
}

const { server, deployment, replicaSet } = aServerWithDeployment();
const loaded = (generation = 4) => reportOf('require-labels', generation, 'Loaded');
const threeLoaded = () => threePods(loaded());
const storedWebhook = (policy: Policy): ExistingWebhook => {
  const built = buildWebhookConfiguration(policy, server, { namespace: NAMESPACE }, 'Q0EK');
  return { ...built, metadata: { ...built.metadata, ...apiserverMeta(1), uid: 'uid-vwc' } };
};

function world(overrides: Partial<World> & { status?: Deployment['status'] } = {}): World {
  const { status, ...rest } = overrides;
  return {
    policy: fullPolicy(aPolicy()),
    policyServer: fullServer(server),
    deployment: fullDeployment(deployment, status ?? available(3)),
    replicaSets: [fullReplicaSet(replicaSet)],
    pods: threeLoaded().map(fullPod),
    webhook: undefined,
    ...rest,
  };
}

const scenarios: Record<string, World> = {
  'every replica loaded': world(),
  'every replica loaded, the webhook serves an older generation': world({
    webhook: storedWebhook(aPolicy({ generation: 3 })),
  }),
  'every replica loaded, the webhook is current': world({ webhook: storedWebhook(aPolicy()) }),
  "a deleted namesake's webhook": world({ webhook: storedWebhook(aPolicy({ uid: 'uid-old' })) }),
  'one replica failed': world({
    pods: [
      ...threeLoaded().slice(0, 2),
      aPod('ps-c', { report: reportOf('require-labels', 4, 'Failed', { message: 'boom' }) }),
    ].map(fullPod),
    webhook: storedWebhook(aPolicy({ generation: 3 })),
  }),
  'one replica not Ready': world({
    pods: [...threeLoaded().slice(0, 2), aPod('ps-c', { ready: false, report: loaded() })].map(
      fullPod,
    ),
  }),
  'one replica terminating': world({
    pods: [...threeLoaded().slice(0, 2), aPod('ps-c', { terminating: true, report: loaded() })].map(
      fullPod,
    ),
  }),
  'one replica on an older generation': world({
    pods: [...threeLoaded().slice(0, 2), aPod('ps-c', { report: loaded(3) })].map(fullPod),
  }),
  'one replica reports a deleted namesake': world({
    pods: [
      ...threeLoaded().slice(0, 2),
      aPod('ps-c', { report: reportOf('require-labels', 4, 'Loaded', { uid: 'uid-old' }) }),
    ].map(fullPod),
  }),
  'one replica has not reported yet': world({
    pods: [...threeLoaded().slice(0, 2), aPod('ps-c')].map(fullPod),
  }),
  'one replica reports other policies only': world({
    pods: [
      ...threeLoaded().slice(0, 2),
      aPod('ps-c', { report: reportOf('deny-latest', 4, 'Loaded') }),
    ].map(fullPod),
  }),
  'one replica still loading': world({
    pods: [
      ...threeLoaded().slice(0, 2),
      aPod('ps-c', { report: reportOf('require-labels', 4, 'Loading') }),
    ].map(fullPod),
  }),
  'a Policy named like an Object.prototype property': world({
    policy: fullPolicy(aPolicy({ name: 'constructor' })),
  }),
  'one replica with an unreadable report': world({
    pods: [...threeLoaded().slice(0, 2), aPod('ps-c', { report: '{not json' })].map(fullPod),
  }),
  'a pod of another ReplicaSet': world({
    pods: [
      ...threeLoaded().slice(0, 2),
      aPod('ps-c', { owner: { kind: 'ReplicaSet', uid: 'uid-rogue' }, report: loaded() }),
    ].map(fullPod),
  }),
  'a pod in another namespace': world({
    pods: [
      ...threeLoaded().slice(0, 2),
      aPod('ps-c', { namespace: 'attacker', report: loaded() }),
    ].map(fullPod),
  }),
  'a ReplicaSet of another Deployment': world({
    replicaSets: [fullReplicaSet(aReplicaSet(deployment, { ownerUid: 'uid-other' }))],
  }),
  'a Deployment of another owner': world({
    deployment: fullDeployment(aDeployment(server, { ownerUid: 'uid-other' }), available(3)),
  }),
  'no Deployment yet': world({ deployment: undefined, pods: [] }),
  'the Deployment is rolling out': world({
    status: { ...available(3), updatedReplicas: 1, availableReplicas: 2, readyReplicas: 2 },
  }),
  'the Deployment has not observed its generation': world({
    deployment: {
      ...fullDeployment(deployment, available(3, 1)),
      metadata: { ...fullDeployment(deployment, available(3)).metadata, generation: 2 },
    },
  }),
  'the new ReplicaSet is not available yet': world({
    status: {
      ...available(3),
      conditions: [
        { type: 'Available', status: 'True', reason: 'MinimumReplicasAvailable' },
        { type: 'Progressing', status: 'True', reason: 'ReplicaSetUpdated' },
      ],
    },
  }),
  'the Deployment passed its progress deadline': world({
    status: {
      ...available(3),
      conditions: [
        { type: 'Progressing', status: 'False', reason: 'ProgressDeadlineExceeded', message: 'x' },
      ],
    },
  }),
  'the Deployment is being deleted': world({
    deployment: fullDeployment(deployment, available(3), { terminating: true }),
  }),
  'the Deployment runs another image': world({
    deployment: fullDeployment(
      {
        ...deployment,
        spec: {
          ...deployment.spec,
          template: { spec: { containers: [{ name: 'policy-server', image: 'old:1' }] } },
        },
      },
      available(3),
    ),
  }),
  'the Deployment has fewer replicas than the server wants': world({
    deployment: fullDeployment(
      { ...deployment, spec: { ...deployment.spec, replicas: 2 } },
      {
        ...available(2),
      },
    ),
  }),
  'a monitor policy with selectors': world({
    policy: fullPolicy(
      aPolicy({
        spec: {
          mode: 'monitor',
          objectSelector: { matchLabels: { app: 'web' } },
          namespaceSelector: { matchExpressions: [{ key: 'env', operator: 'Exists' }] },
        },
      }),
    ),
  }),
};

/** What the three cores decide about a world. */
function decide(w: World) {
  const servedGeneration = servedGenerationOf(w.webhook, w.policy);
  const policy = computePolicy({
    policy: w.policy,
    policyServer: w.policyServer,
    deployment: w.deployment,
    replicaSets: w.replicaSets,
    pods: w.pods,
    reports: w.reports ?? reportsFromPods(w.pods, w.policy.metadata.name),
    servedGeneration,
    now: NOW,
  });
  const webhook = planWebhook({
    policy: w.policy,
    policyServer: w.policyServer,
    intent: policy.webhook,
    existing: w.webhook,
    options: { namespace: NAMESPACE },
    ca: { caBundle: 'Q0EK' },
  });
  const policyServer = planPolicyServer(
    w.policyServer,
    w.deployment,
    { namespace: NAMESPACE },
    NOW,
  );
  return { servedGeneration, policy, webhook, policyServer };
}

const newStore = freshStores('equivalence');

/** The world as the functions see it: written by the watcher's path, read back by theirs. */
async function projected(w: World): Promise<World> {
  const store = newStore();
  const full: Partial<Record<ProjectedKind, object[]>> = {
    policy: [w.policy],
    policyserver: [w.policyServer],
    deployment: w.deployment ? [w.deployment] : [],
    replicaset: w.replicaSets,
    pod: w.pods,
    webhook: w.webhook ? [w.webhook] : [],
  };
  // As the watcher's informers keep them, then as it writes them.
  const objects = Object.fromEntries(
    Object.entries(full).map(([kind, list]) => [
      kind,
      list.map((o) => compact(kind as ProjectedKind, o)),
    ]),
  );
  await store.replaceAll(objects);
  const view = await store.policyView(w.policy.metadata.name, POLICY_SERVER_RESOURCE_PREFIX);
  const serverView = await store.policyServerView(
    w.policyServer.metadata.name,
    policyServerResourceName(w.policyServer.metadata.name),
  );
  assert.ok(view?.policy && view.policyServer, 'the store returns the Policy and its server');
  assert.deepEqual(serverView?.deployment, view.deployment, 'both views read one Deployment');
  return {
    policy: view.policy,
    policyServer: view.policyServer,
    deployment: view.deployment,
    replicaSets: view.replicaSets,
    pods: view.pods,
    reports: view.reports,
    webhook: view.webhook,
  };
}

describe('the cores decide the same from projected objects as from full ones', () => {
  for (const [name, w] of Object.entries(scenarios)) {
    test(name, async () => {
      assert.deepEqual(decide(await projected(w)), decide(w));
    });
  }

  test('the scenarios are not all alike (the comparison has something to compare)', () => {
    const outcomes = new Set(
      Object.values(scenarios).map((w) => {
        const d = decide(w);
        return `${d.policy.status.summary}/${d.webhook.action}/${d.policyServer.status.summary}`;
      }),
    );
    assert.ok(outcomes.size >= 6, [...outcomes].join(', '));
  });
});

// ------------------------------------------------------------ sensitivity

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** Every leaf path of a JSON value, as keys with `[]` for "any array index". */
function leafPaths(value: Json, prefix: string[] = []): string[][] {
  if (Array.isArray(value)) return value.flatMap((item) => leafPaths(item, [...prefix, '[]']));
  if (value !== null && typeof value === 'object') {
    return Object.entries(value).flatMap(([key, child]) => leafPaths(child, [...prefix, key]));
  }
  return [prefix];
}

/** A copy of `value` without what `path` names (in every array item, for `[]`). */
function without(value: Json, path: readonly string[]): Json {
  const [head, ...rest] = path;
  if (head === undefined) return value;
  if (head === '[]') {
    if (!Array.isArray(value)) return value;
    return rest.length === 0 ? [] : value.map((item) => without(item, rest));
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value) || !(head in value))
    return value;
  const { [head]: child, ...others } = value;
  return rest.length === 0 || child === undefined
    ? others
    : { ...others, [head]: without(child, rest) };
}

/**
 * Fields the projection keeps that no core decision depends on, each with its reason. A field
 * added to the projection without a reader, or a reader that stops reading, shows up here.
 */
const keptForOthers: [RegExp, string][] = [
  [/^\w+: (\[\]\.)?(apiVersion|kind)$/, 'type meta: a projection says what it is'],
  [
    /^\w+: (\[\]\.)?metadata\.(name|uid|generation|resourceVersion|creationTimestamp)$/,
    'identity metadata, kept for every kind (the store keys objects by name)',
  ],
  [/metadata\.ownerReferences\.\[\]\.(apiVersion|name)$/, 'owner references are kept whole'],
  [/^(deployment|replicaSets): .*metadata\.labels\./, 'labels are kept whole'],
  [/^pods: \[\]\.metadata\.labels\.pod-template-hash$/, 'labels are kept whole'],
  [
    /^deployment: metadata\.annotations\.rollcall\.dev\/applied-hash$/,
    'control-plane/functions/policyserver.ts skips applying a manifest whose hash is unchanged',
  ],
];

describe('every field the projection keeps is read by a core (dropping it changes a decision)', () => {
  const kinds = ['deployment', 'replicaSets', 'pods', 'webhook'] as const;
  test('for the Deployment, ReplicaSets, pods and webhooks', async () => {
    const views = await Promise.all(Object.values(scenarios).map((w) => projected(w)));
    const decisions = views.map((v) => JSON.stringify(decide(v)));
    const unread: string[] = [];
    for (const kind of kinds) {
      const json = (v: World) => JSON.parse(JSON.stringify(v[kind] ?? null)) as Json;
      const paths = new Map(
        views.flatMap((v) => leafPaths(json(v))).map((path) => [path.join('.'), path]),
      );
      for (const [shown, path] of paths) {
        const changed = views.some((v, i) => {
          if (v[kind] === undefined) return false;
          const dropped = without(json(v), path);
          return JSON.stringify(decide({ ...v, [kind]: dropped })) !== decisions[i];
        });
        if (!changed && shown !== '') unread.push(`${kind}: ${shown}`);
      }
    }
    const unexplained = unread.filter((path) => !keptForOthers.some(([re]) => re.test(path)));
    assert.deepEqual(unexplained, [], 'kept by the projection, read by no core');
    const stale = keptForOthers.filter(([re]) => !unread.some((path) => re.test(path)));
    assert.deepEqual(
      stale.map(([re]) => String(re)),
      [],
      'explained, but a core reads it now',
    );
  });
});
