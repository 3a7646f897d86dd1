import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { policy } from '../../../control-plane/functions/policy.ts';
import { fanOut } from '../../../control-plane/functions/fan-out.ts';
import { webhook } from '../../../control-plane/functions/webhook.ts';
import { reportOnlyChange } from '../../../control-plane/functions/policy-keys.ts';
import type {
  ClusterIndex,
  ReconcileFunction,
  WatchEvent,
} from '../../../control-plane/functions/types.ts';
import { compact, projectPod } from '../../../control-plane/projections/project.ts';
import { keysFor } from '../../../control-plane/registry.ts';

const report = (entries: Record<string, unknown>) => JSON.stringify(entries);
const pod = ({
  reportJson,
  ready = 'True',
  deleting,
}: {
  reportJson?: string;
  ready?: string;
  deleting?: string;
}) =>
  // As the watcher's informer holds it.
  projectPod({
    metadata: {
      name: 'ps-a-1',
      labels: { 'rollcall.dev/policy-server': 'a' },
      annotations: reportJson === undefined ? {} : { 'rollcall.dev/policies': reportJson },
      ownerReferences: [
        { apiVersion: 'apps/v1', kind: 'ReplicaSet', name: 'rs', uid: 'u', controller: true },
      ],
      ...(deleting ? { deletionTimestamp: deleting } : {}),
    },
    status: { conditions: [{ type: 'Ready', status: ready }] },
  });
/** One function's keys for an event, as the watcher asks the registry. */
const keysOf = (fn: ReconcileFunction, event: WatchEvent, index: ClusterIndex) =>
  keysFor([fn], event, index);
const loaded = { uid: 'uid-p', generation: 1, state: 'Loaded' };
const failed = { uid: 'uid-p', generation: 1, state: 'Failed', message: 'x' };

describe('reportOnlyChange', () => {
  const cases: { name: string; old: unknown; now: unknown; want: string[] | undefined }[] = [
    {
      name: 'one entry flipped: only that policy',
      old: pod({ reportJson: report({ p1: loaded, p2: loaded }) }),
      now: pod({ reportJson: report({ p1: failed, p2: loaded }) }),
      want: ['p1'],
    },
    {
      name: 'a first report: the policies it names',
      old: pod({}),
      now: pod({ reportJson: report({ p1: loaded }) }),
      want: ['p1'],
    },
    {
      name: 'an entry removed: that policy',
      old: pod({ reportJson: report({ p1: loaded, p2: loaded }) }),
      now: pod({ reportJson: report({ p2: loaded }) }),
      want: ['p1'],
    },
    {
      name: 'the same report: nothing',
      old: pod({ reportJson: report({ p1: loaded }) }),
      now: pod({ reportJson: report({ p1: loaded }) }),
      want: [],
    },
    {
      name: 'readiness changed: every policy',
      old: pod({ reportJson: report({ p1: loaded }) }),
      now: pod({ reportJson: report({ p1: loaded }), ready: 'False' }),
      want: undefined,
    },
    {
      name: 'the pod started terminating: every policy',
      old: pod({}),
      now: pod({ deleting: '2026-01-01T00:00:00Z' }),
      want: undefined,
    },
    {
      name: 'an unreadable report: every policy',
      old: pod({ reportJson: report({ p1: loaded }) }),
      now: pod({ reportJson: '{not json' }),
      want: undefined,
    },
    {
      name: 'from an unreadable report: every policy',
      old: pod({ reportJson: '[]' }),
      now: pod({ reportJson: report({ p1: loaded }) }),
      want: undefined,
    },
  ];
  for (const c of cases)
    test(c.name, () => assert.deepEqual(reportOnlyChange(c.old, c.now), c.want));
});

describe('the policy function maps pod events to keys', () => {
  const index = { policiesOfServer: (s: string) => (s === 'a' ? ['p1', 'p2', 'p3'] : []) };
  const event = (old: unknown, now: unknown): WatchEvent => ({
    kind: 'Pod',
    type: 'modified',
    old: old as never,
    object: now as never,
  });

  test('a report flip of one policy enqueues only that policy', () => {
    const keys = keysOf(
      policy,
      event(
        pod({ reportJson: report({ p1: loaded, p2: loaded }) }),
        pod({ reportJson: report({ p1: failed, p2: loaded }) }),
      ),
      index,
    );
    assert.deepEqual(keys, ['policy/p1']);
  });

  test('a report flip runs no webhook job by itself: the policy function enqueues it when the webhook must move', () => {
    const flip = event(
      pod({ reportJson: report({ p1: loaded, p2: loaded }) }),
      pod({ reportJson: report({ p1: failed, p2: loaded }) }),
    );
    assert.deepEqual(keysOf(webhook, flip, index), []);
  });

  test('a report entry for a policy of another server is ignored', () => {
    const keys = keysOf(
      policy,
      event(pod({}), pod({ reportJson: report({ elsewhere: loaded }) })),
      index,
    );
    assert.deepEqual(keys, []);
  });

  test('a readiness change enqueues one fan-out of the server, not its policies', () => {
    const change = event(pod({ ready: 'True' }), pod({ ready: 'False' }));
    assert.deepEqual(keysOf(policy, change, index), []);
    assert.deepEqual(keysOf(fanOut, change, index), ['fan-out/a']);
  });

  test('a report-only change fans out nothing', () => {
    const change = event(
      pod({ reportJson: report({ p1: loaded }) }),
      pod({ reportJson: report({ p1: failed }) }),
    );
    assert.deepEqual(keysOf(fanOut, change, index), []);
  });

  test('a new pod, a ReplicaSet or the PolicyServer fans out their server', () => {
    const added: WatchEvent = { kind: 'Pod', type: 'added', object: pod({}) as never };
    const rs: WatchEvent = { kind: 'ReplicaSet', type: 'deleted', object: pod({}) as never };
    const ps: WatchEvent = {
      kind: 'PolicyServer',
      type: 'modified',
      object: { metadata: { name: 'a' } },
    };
    for (const e of [added, rs, ps]) assert.deepEqual(keysOf(fanOut, e, index), ['fan-out/a']);
  });
});

describe("a Policy's status write enqueues no run of rollcall's own", () => {
  const index = { policiesOfServer: () => [] };
  /** A Policy as the watcher's informer holds it, with the managers of its status. */
  const aPolicyWith = (
    statusManagers: string[],
    { generation = 1, label = 'x', ready = '1/3' } = {},
  ) =>
    compact('policy', {
      apiVersion: 'rollcall.dev/v1alpha1',
      kind: 'Policy',
      metadata: {
        name: 'p1',
        generation,
        resourceVersion: String(Math.random()),
        labels: { team: label },
        managedFields: [
          { manager: 'kubectl', operation: 'Apply' },
          ...statusManagers.map((manager) => ({ manager, subresource: 'status' })),
        ],
      },
      spec: { policyServer: 'a' },
      status: { ready },
    } as never) as WatchEvent['object'];
  const modified = (old: WatchEvent['object'], object: WatchEvent['object']): WatchEvent => ({
    kind: 'Policy',
    type: 'modified',
    old,
    object,
  });
  const keys = (event: WatchEvent) => ({
    policy: keysOf(policy, event, index),
    webhook: keysOf(webhook, event, index),
  });

  test("rollcall's own status write: no policy run, no webhook run", () => {
    const event = modified(aPolicyWith(['rollcall']), aPolicyWith(['rollcall'], { ready: '2/3' }));
    assert.deepEqual(keys(event), { policy: [], webhook: [] });
  });

  test('a status someone else wrote: the policy function puts it right; the webhook never reads it', () => {
    const event = modified(
      aPolicyWith(['rollcall']),
      aPolicyWith(['rollcall', 'kubectl-edit'], { ready: '99/99' }),
    );
    assert.deepEqual(keys(event), { policy: ['policy/p1'], webhook: [] });
  });

  test('a new generation, a label, a resync or a create run both', () => {
    const old = aPolicyWith(['rollcall']);
    for (const event of [
      modified(old, aPolicyWith(['rollcall'], { generation: 2 })),
      modified(old, aPolicyWith(['rollcall'], { label: 'y' })),
      { kind: 'Policy', type: 'resync', object: old } as const,
      { kind: 'Policy', type: 'added', object: old } as const,
    ])
      assert.deepEqual(keys(event), { policy: ['policy/p1'], webhook: ['webhook/p1'] });
  });

  test('property: a policy run is skipped only for a status-only change that rollcall alone wrote', () => {
    const side = fc.record({
      managers: fc.subarray(['rollcall', 'kubectl-edit', 'scribbler']),
      generation: fc.integer({ min: 1, max: 3 }),
      label: fc.constantFrom('x', 'y'),
      ready: fc.constantFrom('1/3', '3/3'),
    });
    fc.assert(
      fc.property(side, side, (a, b) => {
        const event = modified(aPolicyWith(a.managers, a), aPolicyWith(b.managers, b));
        const statusOnly = a.generation === b.generation && a.label === b.label;
        const ownStatus = b.managers.every((m) => m === 'rollcall');
        assert.deepEqual(keys(event), {
          policy: statusOnly && ownStatus ? [] : ['policy/p1'],
          webhook: statusOnly ? [] : ['webhook/p1'],
        });
      }),
    );
  });
});
