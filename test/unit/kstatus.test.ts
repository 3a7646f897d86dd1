import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  aggregateStatus,
  computeStatus,
  KIND_RULES,
  type KStatus,
} from '../../lib/kstatus/index.ts';
import { loadYamlFixture } from '../fixtures/yaml.ts';

interface Case {
  name: string;
  expect: { status: KStatus; condition: string; message?: string };
  object: unknown;
}

const cases = loadYamlFixture('kstatus/cases.yaml') as Case[];
const now = new Date('2024-01-01T00:00:20Z');

describe('computeStatus', () => {
  for (const c of cases) {
    test(c.name, () => {
      const result = computeStatus(c.object, { now });
      assert.equal(result.status, c.expect.status, result.message);
      const conditions = result.conditions.map((x) => `${x.type}/${x.reason}`);
      assert.deepEqual(conditions, c.expect.condition === 'none' ? [] : [c.expect.condition]);
      for (const condition of result.conditions) {
        assert.equal(condition.status, 'True', 'kstatus only reports abnormal-true conditions');
      }
      if (c.expect.message !== undefined) assert.equal(result.message, c.expect.message);
    });
  }

  test('every kind in the lookup table has at least one table case', () => {
    const covered = new Set(
      cases.map((c) => {
        const { apiVersion, kind } = c.object as { apiVersion: string; kind: string };
        return apiVersion.includes('/') ? `${apiVersion.split('/')[0]}/${kind}` : kind;
      }),
    );
    const legacyGroups = ['extensions/Deployment', 'extensions/DaemonSet', 'extensions/ReplicaSet'];
    const missing = Object.keys(KIND_RULES).filter(
      (key) => !covered.has(key) && !legacyGroups.includes(key),
    );
    assert.deepEqual(missing, []);
  });

  test('a missing object is NotFound', () => {
    assert.equal(computeStatus(undefined, { now }).status, 'NotFound');
    assert.equal(computeStatus(null, { now }).status, 'NotFound');
  });

  test('something that is not an object is Unknown rather than a crash', () => {
    for (const junk of ['Pod', 42, ['a'], true]) {
      assert.equal(computeStatus(junk, { now }).status, 'Unknown');
    }
  });

  test('the legacy extensions group uses the same rules as apps', () => {
    const deployment = {
      apiVersion: 'extensions/v1beta1',
      kind: 'Deployment',
      metadata: { name: 'x' },
    };
    assert.equal(computeStatus(deployment, { now }).conditions[0]?.reason, 'LessReplicas');
  });

  test('a client-node object with Date timestamps is read like JSON', () => {
    const pod = {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'p', deletionTimestamp: new Date('2024-01-01T00:00:00Z') },
    };
    assert.equal(computeStatus(pod, { now }).status, 'Terminating');
  });
});

describe('aggregateStatus', () => {
  const table: { name: string; statuses: KStatus[]; desired?: KStatus; expected: KStatus }[] = [
    { name: 'an empty set has reached the desired status', statuses: [], expected: 'Current' },
    { name: 'all Current is Current', statuses: ['Current', 'Current'], expected: 'Current' },
    {
      name: 'any Failed is Failed, even next to Unknown',
      statuses: ['Current', 'Unknown', 'Failed'],
      expected: 'Failed',
    },
    {
      name: 'any Unknown without Failed is Unknown',
      statuses: ['InProgress', 'Unknown'],
      expected: 'Unknown',
    },
    {
      name: 'a mix of Current and InProgress is InProgress',
      statuses: ['Current', 'InProgress'],
      expected: 'InProgress',
    },
    {
      name: 'Terminating is not Current',
      statuses: ['Current', 'Terminating'],
      expected: 'InProgress',
    },
    { name: 'NotFound is not Current', statuses: ['NotFound'], expected: 'InProgress' },
    {
      name: 'all NotFound reaches a NotFound goal',
      statuses: ['NotFound', 'NotFound'],
      desired: 'NotFound',
      expected: 'NotFound',
    },
    {
      name: 'a Current object misses a NotFound goal',
      statuses: ['NotFound', 'Current'],
      desired: 'NotFound',
      expected: 'InProgress',
    },
  ];
  for (const row of table) {
    test(row.name, () => assert.equal(aggregateStatus(row.statuses, row.desired), row.expected));
  }
});
