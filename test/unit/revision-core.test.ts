import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { PolicyRevision } from '../../api/v1alpha1.ts';
import { policyRevisionSchema } from '../../api/v1alpha1.ts';
import { desiredRevision, planRevisions } from '../../control-plane/functions/revision-core.ts';
import { aPolicy, POLICY_UID } from '../fixtures/builders.ts';

const policy = aPolicy({ generation: 6 });

/** A revision of require-labels at `generation`, of this Policy unless `uid` says otherwise. */
const revision = (generation: number, uid = POLICY_UID): PolicyRevision =>
  desiredRevision(aPolicy({ generation, uid }));

describe('desiredRevision', () => {
  const built = desiredRevision(policy);

  test('is named <policy>-<generation> and records the spec, uid and generation', () => {
    assert.equal(built.metadata.name, 'require-labels-6');
    assert.deepEqual(built.spec, {
      policy: 'require-labels',
      policyUID: POLICY_UID,
      generation: 6,
      policySpec: policy.spec,
    });
  });

  test('is labelled with its Policy and PolicyServer, and owned by the Policy', () => {
    assert.deepEqual(built.metadata.labels, {
      'rollcall.dev/policy': 'require-labels',
      'rollcall.dev/policy-server': 'default',
    });
    assert.deepEqual(built.metadata['ownerReferences'], [
      {
        apiVersion: 'rollcall.dev/v1alpha1',
        kind: 'Policy',
        name: 'require-labels',
        uid: POLICY_UID,
        controller: true,
      },
    ]);
  });

  test('passes its own schema (what the CRD and the policy servers read)', () => {
    assert.ok(policyRevisionSchema.safeParse(built).success);
  });
});

describe('planRevisions, when the webhook is about to serve generation 6', () => {
  const rows: {
    name: string;
    existing: PolicyRevision[];
    clear: string[];
    create: boolean;
    prune: string[];
  }[] = [
    {
      name: 'the first revision is created, nothing is pruned',
      existing: [],
      clear: [],
      create: true,
      prune: [],
    },
    {
      name: 'a revision that already records this generation of this Policy is not created again',
      existing: [revision(6)],
      clear: [],
      create: false,
      prune: [],
    },
    {
      name: 'the newest 3 are kept, older ones pruned',
      existing: [revision(2), revision(3), revision(4), revision(5)],
      clear: [],
      create: true,
      prune: ['require-labels-2', 'require-labels-3'],
    },
    {
      name: 'a deleted namesake holding the name is cleared before the new one is created',
      existing: [revision(6, 'uid-old')],
      clear: ['require-labels-6'],
      create: true,
      prune: [],
    },
    {
      name: "a deleted namesake's other revisions are pruned, whatever their generation",
      existing: [revision(9, 'uid-old'), revision(5)],
      clear: [],
      create: true,
      prune: ['require-labels-9'],
    },
  ];
  for (const row of rows) {
    test(row.name, () => {
      const plan = planRevisions(policy, row.existing);
      assert.deepEqual(plan.clear, row.clear);
      assert.equal(plan.create?.metadata.name, row.create ? 'require-labels-6' : undefined);
      assert.deepEqual(plan.prune, row.prune);
    });
  }

  test('the served generation is never pruned, even when more than 3 are newer', () => {
    // Cannot happen with increasing generations; the rule holds regardless.
    const plan = planRevisions(policy, [revision(7), revision(8), revision(9), revision(3)]);
    assert.ok(!plan.prune.includes('require-labels-6'));
    assert.deepEqual(plan.prune, ['require-labels-3']);
  });
});
