import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { Pod } from '../../api/kube.ts';
import { reportsFromPods } from '../../api/report.ts';
import type { PolicyStatus } from '../../api/v1alpha1.ts';
import {
  computePolicy,
  type PolicyCoreInput,
  type PolicyDecision,
} from '../../control-plane/functions/policy-core.ts';
import {
  aDeployment,
  aPod,
  aPolicy,
  aPolicyServer,
  aReplicaSet,
  aServerWithDeployment,
  NOW,
  POLICY_UID,
  reportOf,
  threePods,
} from '../fixtures/builders.ts';

const POLICY = 'require-labels';
const { server, deployment, replicaSet } = aServerWithDeployment();

const loaded = (generation = 4) => reportOf(POLICY, generation, 'Loaded');
const loading = (generation = 4) => reportOf(POLICY, generation, 'Loading');
const failedWith = (message: string, generation = 4) =>
  reportOf(POLICY, generation, 'Failed', { message });
const threeLoadedPods = (generation = 4): Pod[] => threePods(loaded(generation));

/** The core's input; the pods' reports are read from their annotations unless given. */
function input(overrides: Partial<PolicyCoreInput> = {}): PolicyCoreInput {
  const given = {
    policy: aPolicy(),
    policyServer: server,
    deployment,
    replicaSets: [replicaSet],
    pods: threeLoadedPods(),
    servedGeneration: undefined,
    now: NOW,
    ...overrides,
  };
  return { reports: reportsFromPods(given.pods, given.policy.metadata.name), ...given };
}

/** The fixtures' Policy with one rule over `resources` of `apiGroups` (every group by default). */
const guardedPolicy = (resources: string[], apiGroups = ['*']) =>
  aPolicy({
    spec: {
      rules: [
        { operations: ['CREATE', 'UPDATE'], apiGroups, apiVersions: ['*'], resources, scope: '*' },
      ],
    },
  });

function conditionTypes(status: PolicyStatus): string[] {
  return (status.conditions ?? []).map((c) => `${c.type}=${c.status}/${c.reason}`);
}

/** Running the core again on its own output must change nothing and emit nothing. */
function assertSteadyState(first: PolicyCoreInput, decision: PolicyDecision): void {
  const again = computePolicy({
    ...first,
    policy: { ...first.policy, status: decision.status },
    servedGeneration: decision.status.servedGeneration,
    now: new Date(NOW.getTime() + 60_000),
  });
  assert.deepEqual(again.status, decision.status, 'a second reconcile changes nothing');
  assert.deepEqual(again.events, [], 'events are emitted on transitions only');
}

describe('the webhook decision table', () => {
  const rows: {
    name: string;
    input: PolicyCoreInput;
    conditions: string[];
    webhook: PolicyDecision['webhook'];
    servedGeneration: number | undefined;
    message?: RegExp;
    events: string[];
  }[] = [
    {
      name: 'every Ready pod loaded the current generation, and enough of them: Ready, webhook serves it',
      input: input(),
      conditions: ['Ready=True/Loaded'],
      webhook: { kind: 'serve', generation: 4 },
      servedGeneration: 4,
      message: /generation 4 loaded on 3\/3 replicas/,
      events: ['Normal/Loaded'],
    },
    {
      name: 'still loading with an earlier generation fully loaded: Reconciling, webhook keeps the old rules',
      input: input({
        pods: [
          aPod('ps-a', { report: loaded() }),
          aPod('ps-b', { report: loading() }),
          aPod('ps-c', { report: loaded(3) }),
        ],
        servedGeneration: 3,
      }),
      conditions: ['Ready=False/Loading', 'Reconciling=True/Loading'],
      webhook: { kind: 'keep' },
      servedGeneration: 3,
      message:
        /generation 4 loaded on 1\/3 replicas; waiting for pod ps-b \(loading generation 4\)/,
      events: [],
    },
    {
      name: 'never loaded anywhere yet: Reconciling, no webhook',
      input: input({ pods: threePods(loading()) }),
      conditions: ['Ready=False/Loading', 'Reconciling=True/Loading'],
      webhook: { kind: 'absent' },
      servedGeneration: undefined,
      events: [],
    },
    {
      name: 'the current generation failed on a replica after an earlier one loaded: Stalled, webhook keeps the old rules',
      input: input({
        pods: [
          aPod('ps-a', { report: loaded() }),
          aPod('ps-b', { report: failedWith('module download failed: 404') }),
          aPod('ps-c', { report: loaded() }),
        ],
        servedGeneration: 3,
      }),
      conditions: ['Ready=False/LoadFailed', 'Stalled=True/LoadFailed'],
      webhook: { kind: 'keep' },
      servedGeneration: 3,
      message:
        /^generation 4 failed to load on pod ps-b: module download failed: 404; the webhook still enforces generation 3$/,
      events: ['Warning/LoadFailed'],
    },
    {
      name: 'the current generation failed and nothing was ever loaded: Stalled, no webhook',
      input: input({ pods: [aPod('ps-a', { report: failedWith('syntax error') })] }),
      conditions: ['Ready=False/LoadFailed', 'Stalled=True/LoadFailed'],
      webhook: { kind: 'absent' },
      servedGeneration: undefined,
      message: /pod ps-a: syntax error/,
      events: ['Warning/LoadFailed'],
    },
    {
      name: 'the policy server does not exist: Stalled, webhook unchanged',
      input: input({
        policyServer: undefined,
        deployment: undefined,
        pods: [],
        servedGeneration: 3,
      }),
      conditions: ['Ready=False/PolicyServerNotFound', 'Stalled=True/PolicyServerNotFound'],
      webhook: { kind: 'keep' },
      servedGeneration: 3,
      message: /policy server "default" does not exist/,
      events: ['Warning/PolicyServerNotFound'],
    },
    {
      name: 'the policy server has no Deployment yet: Reconciling, webhook unchanged',
      input: input({ deployment: undefined, pods: [], servedGeneration: 3 }),
      conditions: [
        'Ready=False/PolicyServerNotDeployed',
        'Reconciling=True/PolicyServerNotDeployed',
      ],
      webhook: { kind: 'keep' },
      servedGeneration: 3,
      events: [],
    },
    {
      name: 'the policy server has no pods: Reconciling, webhook unchanged',
      input: input({ pods: [], servedGeneration: 3 }),
      conditions: ['Ready=False/WaitingForPods', 'Reconciling=True/WaitingForPods'],
      webhook: { kind: 'keep' },
      servedGeneration: 3,
      message: /no running pods yet \(0\/3\)/,
      events: [],
    },
    {
      name: 'the policy server is scaled to zero: Stalled, webhook unchanged',
      input: input({
        policyServer: aPolicyServer({ spec: { replicas: 0 } }),
        pods: [],
        servedGeneration: 3,
      }),
      conditions: ['Ready=False/PolicyServerScaledToZero', 'Stalled=True/PolicyServerScaledToZero'],
      webhook: { kind: 'keep' },
      servedGeneration: 3,
      events: ['Warning/PolicyServerScaledToZero'],
    },
    {
      name: 'rules over every resource, loaded everywhere and never served: Stalled, no webhook',
      input: input({ policy: guardedPolicy(['*']) }),
      conditions: [
        'Ready=False/InterceptsClusterCriticalResources',
        'Stalled=True/InterceptsClusterCriticalResources',
      ],
      webhook: { kind: 'absent' },
      servedGeneration: undefined,
      message:
        /^spec\.rules\[0\] \(apiGroups \["\*"\], resources \["\*"\]\) would intercept nodes \(core\); leases \(coordination\.k8s\.io\);.*list the resources you mean explicitly, leaving these out; no webhook is registered$/,
      events: ['Warning/InterceptsClusterCriticalResources'],
    },
    {
      name: 'a new generation whose rules reach Leases, loaded everywhere: Stalled, the webhook keeps the old rules',
      input: input({ policy: guardedPolicy(['leases']), servedGeneration: 3 }),
      conditions: [
        'Ready=False/InterceptsClusterCriticalResources',
        'Stalled=True/InterceptsClusterCriticalResources',
      ],
      webhook: { kind: 'keep' },
      servedGeneration: 3,
      message:
        /would intercept leases \(coordination\.k8s\.io\):.*; the webhook still enforces generation 3$/,
      events: ['Warning/InterceptsClusterCriticalResources'],
    },
    {
      name: 'rules over Nodes, even with the policy server missing: refused for its rules first',
      input: input({
        policy: guardedPolicy(['nodes/status'], ['']),
        policyServer: undefined,
        deployment: undefined,
        pods: [],
      }),
      conditions: [
        'Ready=False/InterceptsClusterCriticalResources',
        'Stalled=True/InterceptsClusterCriticalResources',
      ],
      webhook: { kind: 'absent' },
      servedGeneration: undefined,
      message: /spec\.rules\[0\] .*would intercept nodes\/status \(core\)/,
      events: ['Warning/InterceptsClusterCriticalResources'],
    },
  ];

  for (const row of rows) {
    test(row.name, () => {
      const decision = computePolicy(row.input);
      assert.deepEqual(conditionTypes(decision.status), row.conditions);
      assert.deepEqual(decision.webhook, row.webhook);
      assert.equal(decision.status.servedGeneration, row.servedGeneration);
      assert.equal(decision.status.observedGeneration, 4);
      assert.equal(decision.status.summary, row.conditions[1]?.split('=')[0] ?? 'Ready');
      if (row.message) assert.match(decision.status.conditions?.[0]?.message ?? '', row.message);
      assert.deepEqual(
        decision.events.map((e) => `${e.type}/${e.reason}`),
        row.events,
      );
      assertSteadyState(row.input, decision);
    });
  }
});

describe('counting replicas', () => {
  const rows: {
    name: string;
    pods: Pod[];
    ready: string;
    readyReplicas: number;
    failedReplicas: number;
    state: string;
  }[] = [
    {
      name: 'fewer loaded pods than desired replicas is not Ready',
      pods: threeLoadedPods().slice(0, 2),
      ready: '2/3',
      readyReplicas: 2,
      failedReplicas: 0,
      state: 'Reconciling',
    },
    {
      name: 'a surge pod that is not Ready and still loading does not hold back Ready',
      pods: [...threeLoadedPods(), aPod('ps-surge', { ready: false, report: loading() })],
      ready: '3/3',
      readyReplicas: 3,
      failedReplicas: 0,
      state: 'Ready',
    },
    {
      name: 'a Ready pod still on the previous generation holds back Ready',
      pods: [...threeLoadedPods(), aPod('ps-old', { report: loaded(3) })],
      ready: '3/3',
      readyReplicas: 3,
      failedReplicas: 0,
      state: 'Reconciling',
    },
    {
      name: 'a Ready pod that has not reported yet holds back Ready',
      pods: [...threeLoadedPods(), aPod('ps-new')],
      ready: '3/3',
      readyReplicas: 3,
      failedReplicas: 0,
      state: 'Reconciling',
    },
    {
      name: 'a Ready pod whose report does not mention the policy holds back Ready',
      pods: [
        ...threeLoadedPods(),
        aPod('ps-other', { report: reportOf('deny-latest', 2, 'Loaded') }),
      ],
      ready: '3/3',
      readyReplicas: 3,
      failedReplicas: 0,
      state: 'Reconciling',
    },
    {
      name: 'a failure reported by a pod that is not Ready still stalls the policy',
      pods: [...threeLoadedPods(), aPod('ps-d', { ready: false, report: failedWith('boom') })],
      ready: '3/3',
      readyReplicas: 3,
      failedReplicas: 1,
      state: 'Stalled',
    },
    {
      name: 'a failure of an older generation is history, not a failure of this one',
      pods: [...threeLoadedPods().slice(0, 2), aPod('ps-c', { report: failedWith('old', 3) })],
      ready: '2/3',
      readyReplicas: 2,
      failedReplicas: 0,
      state: 'Reconciling',
    },
    {
      name: 'a report from a deleted namesake never reads Ready',
      pods: threePods(reportOf(POLICY, 4, 'Loaded', { uid: 'uid-pol-deleted' })),
      ready: '0/3',
      readyReplicas: 0,
      failedReplicas: 0,
      state: 'Reconciling',
    },
    {
      name: "a deleted namesake's failure of the same generation does not stall the policy",
      pods: [
        ...threeLoadedPods().slice(0, 2),
        aPod('ps-c', {
          report: reportOf(POLICY, 4, 'Failed', { uid: 'uid-pol-deleted', message: 'old' }),
        }),
      ],
      ready: '2/3',
      readyReplicas: 2,
      failedReplicas: 0,
      state: 'Reconciling',
    },
    {
      name: "a report of a newer generation than the Policy's (a recreated Policy) does not count as loaded",
      pods: threeLoadedPods(7),
      ready: '0/3',
      readyReplicas: 0,
      failedReplicas: 0,
      state: 'Reconciling',
    },
  ];
  for (const row of rows) {
    test(row.name, () => {
      const { status } = computePolicy(input({ pods: row.pods }));
      assert.equal(status.ready, row.ready);
      assert.equal(status.readyReplicas, row.readyReplicas);
      assert.equal(status.failedReplicas, row.failedReplicas);
      assert.equal(status.replicas, 3);
      assert.equal(status.summary, row.state);
    });
  }
});

test('the message says a replica reports an older Policy of the same name', () => {
  const pods = [
    ...threeLoadedPods(),
    aPod('ps-d', { report: reportOf(POLICY, 4, 'Loaded', { uid: 'uid-pol-deleted' }) }),
  ];
  const decision = computePolicy(input({ pods }));
  assert.equal(decision.status.summary, 'Reconciling');
  assert.match(
    decision.status.conditions?.[0]?.message ?? '',
    /waiting for pod ps-d \(reports an older Policy of the same name \(uid uid-pol-deleted, this one is uid-pol\)\)/,
  );
});

describe("trust rules: only the server's own pods count", () => {
  const otherDeployment = aDeployment(server, { uid: 'uid-other-deploy' });
  const rows: { name: string; overrides: Partial<PolicyCoreInput>; reason: string }[] = [
    {
      name: 'a pod without the policy-server label does not count',
      overrides: { pods: [aPod('ps-a', { server: null, report: loaded() })] },
      reason: 'WaitingForPods',
    },
    {
      name: 'a pod labelled for another policy server does not count',
      overrides: { pods: [aPod('ps-a', { server: 'other', report: loaded() })] },
      reason: 'WaitingForPods',
    },
    {
      name: 'a pod without a controller does not count',
      overrides: { pods: [aPod('ps-a', { owner: null, report: loaded() })] },
      reason: 'WaitingForPods',
    },
    {
      name: 'a pod controlled by something other than a ReplicaSet does not count',
      overrides: {
        pods: [aPod('ps-a', { owner: { kind: 'StatefulSet', uid: 'uid-rs' }, report: loaded() })],
      },
      reason: 'WaitingForPods',
    },
    {
      name: 'a pod controlled by an unknown ReplicaSet does not count',
      overrides: {
        pods: [aPod('ps-a', { owner: { kind: 'ReplicaSet', uid: 'uid-rogue' }, report: loaded() })],
      },
      reason: 'WaitingForPods',
    },
    {
      name: 'a pod whose ReplicaSet belongs to another Deployment does not count',
      overrides: {
        replicaSets: [aReplicaSet(otherDeployment)],
        pods: [aPod('ps-a', { report: loaded() })],
      },
      reason: 'WaitingForPods',
    },
    {
      name: 'a pod in another namespace does not count, even with a matching owner uid',
      overrides: { pods: [aPod('ps-a', { namespace: 'attacker', report: loaded() })] },
      reason: 'WaitingForPods',
    },
    {
      name: 'a ReplicaSet in another namespace does not vouch for pods',
      overrides: {
        replicaSets: [aReplicaSet(deployment, { namespace: 'attacker' })],
        pods: [aPod('ps-a', { report: loaded() })],
      },
      reason: 'WaitingForPods',
    },
    {
      name: 'a Deployment not controlled by this PolicyServer is not its Deployment',
      overrides: { deployment: aDeployment(server, { ownerUid: 'uid-someone-else' }) },
      reason: 'PolicyServerNotDeployed',
    },
    {
      name: 'a terminating pod does not count as loaded',
      overrides: { pods: [aPod('ps-a', { terminating: true, report: loaded() })] },
      reason: 'WaitingForPods',
    },
    {
      name: 'a pod that is not Ready does not count as loaded',
      overrides: {
        policyServer: aPolicyServer({ spec: { replicas: 1 } }),
        pods: [aPod('ps-a', { ready: false, report: loaded() })],
      },
      reason: 'Loading',
    },
  ];
  for (const row of rows) {
    test(row.name, () => {
      const { status, webhook } = computePolicy(
        input({ policyServer: aPolicyServer({ spec: { replicas: 1 } }), ...row.overrides }),
      );
      assert.equal(status.readyReplicas, 0);
      assert.equal(status.conditions?.[0]?.status, 'False');
      assert.equal(status.conditions?.[0]?.reason, row.reason);
      assert.notEqual(webhook.kind, 'serve');
    });
  }

  test('the same pod, trusted, does make the policy Ready (the rows above can fail)', () => {
    const { status } = computePolicy(
      input({
        policyServer: aPolicyServer({ spec: { replicas: 1 } }),
        pods: [aPod('ps-a', { report: loaded() })],
      }),
    );
    assert.equal(status.summary, 'Ready');
  });

  test('a failure reported by an untrusted pod is ignored', () => {
    const rogue = aPod('rogue', { server: null, report: failedWith('I say it failed') });
    const { status } = computePolicy(input({ pods: [...threeLoadedPods(), rogue] }));
    assert.equal(status.summary, 'Ready');
    assert.equal(status.failedReplicas, 0);
  });

  test('a failure reported by a terminating pod is ignored', () => {
    const leaving = aPod('ps-old', { terminating: true, report: failedWith('shutting down') });
    const { status } = computePolicy(input({ pods: [...threeLoadedPods(), leaving] }));
    assert.equal(status.summary, 'Ready');
  });
});

describe('bad replica reports make that pod count as failed', () => {
  const rows: { name: string; raw: string; message: RegExp }[] = [
    {
      name: 'a report that is not JSON',
      raw: '{not json',
      message: /invalid rollcall\.dev\/policies annotation: report is not valid JSON/,
    },
    {
      name: 'a report that is a list',
      raw: '[]',
      message: /must be a JSON object keyed by policy name, got an array/,
    },
    {
      name: 'a report with a string generation',
      raw: JSON.stringify({ [POLICY]: { uid: POLICY_UID, generation: '4', state: 'Loaded' } }),
      message: /require-labels\.generation/,
    },
    {
      name: 'a report with an unknown state',
      raw: JSON.stringify({ [POLICY]: { uid: POLICY_UID, generation: 4, state: 'Done' } }),
      message: /require-labels\.state/,
    },
    {
      name: 'a report in the v1 contract (no uid)',
      raw: JSON.stringify({ [POLICY]: { generation: 4, state: 'Loaded' } }),
      message: /require-labels\.uid/,
    },
    {
      name: 'a report over 192 KiB',
      raw: JSON.stringify({ pad: 'x'.repeat(200_000) }),
      message: /over the 196608-byte limit/,
    },
    {
      name: 'a report whose entry for this policy is fine but another entry is broken (never trusted in part)',
      raw: JSON.stringify({
        [POLICY]: { uid: POLICY_UID, generation: 4, state: 'Loaded' },
        other: { uid: 'uid-other', generation: 1, state: 3 },
      }),
      message: /other\.state/,
    },
  ];
  for (const row of rows) {
    test(`${row.name} stalls the policy with a clear message`, () => {
      const pods = [...threeLoadedPods().slice(0, 2), aPod('ps-c', { report: row.raw })];
      const decision = computePolicy(input({ pods }));
      assert.equal(decision.status.failedReplicas, 1);
      assert.equal(decision.status.readyReplicas, 2);
      assert.equal(decision.status.failures?.[0]?.pod, 'ps-c');
      assert.match(decision.status.failures?.[0]?.message ?? '', row.message);
      assert.equal(decision.status.summary, 'Stalled');
      assert.match(
        decision.status.conditions?.[0]?.message ?? '',
        /on pod ps-c: invalid rollcall\.dev\/policies annotation/,
      );
    });
  }

  test('a policy named like an Object.prototype member is not found in a report that lacks it', () => {
    const decision = computePolicy(
      input({ policy: aPolicy({ name: 'constructor' }), pods: threeLoadedPods() }),
    );
    assert.equal(decision.status.readyReplicas, 0);
    assert.equal(decision.status.summary, 'Reconciling');
  });
});

describe('failures in status', () => {
  const pods = Array.from({ length: 12 }, (_, i) =>
    aPod(`ps-${String(i).padStart(2, '0')}`, { report: failedWith(`error ${i}`) }),
  ).reverse();
  const decision = computePolicy(
    input({ policyServer: aPolicyServer({ spec: { replicas: 12 } }), pods }),
  );

  test('are at most 10, sorted by pod name, while failedReplicas counts them all', () => {
    assert.equal(decision.status.failedReplicas, 12);
    assert.deepEqual(
      decision.status.failures?.map((f) => f.pod),
      Array.from({ length: 10 }, (_, i) => `ps-${String(i).padStart(2, '0')}`),
    );
  });

  test('the Stalled message names the first failing pod and how many more failed', () => {
    assert.equal(
      decision.status.conditions?.[0]?.message,
      'generation 4 failed to load on pod ps-00: error 0 (and 11 more replicas); no webhook is registered',
    );
  });

  test('one Warning event per shown failure, naming the replica and its message', () => {
    assert.equal(decision.events.length, 10);
    assert.deepEqual(decision.events[0], {
      type: 'Warning',
      reason: 'LoadFailed',
      action: 'Load',
      note: 'pod ps-00 failed to load generation 4: error 0',
    });
  });

  test('a failing pod without a message still gets a readable one', () => {
    const { status } = computePolicy(
      input({ pods: [aPod('ps-a', { report: reportOf(POLICY, 4, 'Failed') })] }),
    );
    assert.equal(status.failures?.[0]?.message, 'load failed (no message)');
  });
});

describe('events on transitions', () => {
  test('a new generation becoming Ready emits Normal again', () => {
    const readyAt3 = computePolicy(
      input({ policy: aPolicy({ generation: 3 }), pods: threeLoadedPods(3) }),
    );
    const next = computePolicy(
      input({ policy: aPolicy({ generation: 4, status: readyAt3.status }), servedGeneration: 3 }),
    );
    assert.deepEqual(
      next.events.map((e) => `${e.type}/${e.reason}`),
      ['Normal/Loaded'],
    );
    assert.match(next.events[0]?.note ?? '', /generation 4 loaded on 3\/3 replicas/);
  });

  test('only a failure not seen before emits a Warning', () => {
    const first = computePolicy(
      input({
        pods: [...threeLoadedPods().slice(0, 2), aPod('ps-c', { report: failedWith('boom') })],
      }),
    );
    const second = computePolicy(
      input({
        policy: aPolicy({ status: first.status }),
        pods: [
          aPod('ps-a', { report: failedWith('bang') }),
          aPod('ps-b', { report: loaded() }),
          aPod('ps-c', { report: failedWith('boom') }),
        ],
      }),
    );
    assert.deepEqual(
      second.events.map((e) => e.note),
      ['pod ps-a failed to load generation 4: bang'],
    );
  });

  test('lastTransitionTime of Ready stays put while the message stays the same', () => {
    const first = computePolicy(input());
    const later = computePolicy(
      input({
        policy: aPolicy({ status: first.status }),
        now: new Date(NOW.getTime() + 3_600_000),
      }),
    );
    assert.equal(later.status.conditions?.[0]?.lastTransitionTime, NOW.toISOString());
  });
});
