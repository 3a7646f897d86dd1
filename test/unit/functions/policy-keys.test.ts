import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { policy, reportOnlyChange } from '../../../functions/policy.ts';
import type { WatchEvent } from '../../../functions/types.ts';

const report = (entries: Record<string, unknown>) => JSON.stringify(entries);
const pod = ({
  reportJson,
  ready = 'True',
  deleting,
}: {
  reportJson?: string;
  ready?: string;
  deleting?: string;
}) => ({
  metadata: {
    name: 'ps-a-1',
    labels: { 'rollcall.dev/policy-server': 'a' },
    annotations: reportJson === undefined ? {} : { 'rollcall.dev/policies': reportJson },
    ownerReferences: [{ kind: 'ReplicaSet', name: 'rs', uid: 'u', controller: true }],
    ...(deleting ? { deletionTimestamp: deleting } : {}),
  },
  status: { conditions: [{ type: 'Ready', status: ready }] },
});
const loaded = { generation: 1, state: 'Loaded' };
const failed = { generation: 1, state: 'Failed', message: 'x' };

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
    const keys = policy.keysFor(
      event(
        pod({ reportJson: report({ p1: loaded, p2: loaded }) }),
        pod({ reportJson: report({ p1: failed, p2: loaded }) }),
      ),
      index,
    );
    assert.deepEqual(keys, ['policy/p1']);
  });

  test('a report entry for a policy of another server is ignored', () => {
    const keys = policy.keysFor(
      event(pod({}), pod({ reportJson: report({ elsewhere: loaded }) })),
      index,
    );
    assert.deepEqual(keys, []);
  });

  test('a readiness change enqueues every policy of the server', () => {
    const keys = policy.keysFor(event(pod({ ready: 'True' }), pod({ ready: 'False' })), index);
    assert.deepEqual(keys, ['policy/p1', 'policy/p2', 'policy/p3']);
  });
});
