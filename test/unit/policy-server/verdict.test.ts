import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { admissionResponse, type PolicyAnswerContext } from '../../../data-plane/verdict.ts';

const protect: PolicyAnswerContext = {
  policy: 'p',
  generation: 2,
  actions: ['Deny'],
  failurePolicy: 'Fail',
};
const monitor: PolicyAnswerContext = { ...protect, actions: ['Warn'] };
const ignore: PolicyAnswerContext = { ...protect, failurePolicy: 'Ignore' };

describe('verdict mapping', () => {
  test('protect: an allowed verdict is allowed', () => {
    assert.deepEqual(
      admissionResponse('u1', protect, { kind: 'verdict', verdict: { allowed: true } }),
      {
        response: { uid: 'u1', allowed: true },
        verdict: 'allowed',
      },
    );
  });

  test('protect: a denial carries the validation’s message, reason and code', () => {
    const r = admissionResponse('u1', protect, {
      kind: 'verdict',
      verdict: { allowed: false, message: 'no latest tag', reason: 'Invalid', code: 422 },
    });
    assert.deepEqual(r, {
      response: {
        uid: 'u1',
        allowed: false,
        status: { code: 422, message: 'no latest tag', reason: 'Invalid' },
      },
      verdict: 'denied',
    });
  });

  test('protect: a denial without reason is Forbidden (403)', () => {
    const r = admissionResponse('u1', protect, {
      kind: 'verdict',
      verdict: { allowed: false, message: 'm' },
    });
    assert.deepEqual(r.response.status, { code: 403, message: 'm', reason: 'Forbidden' });
  });

  test('Warn: a denial is allowed with a warning naming what it would have denied', () => {
    const r = admissionResponse('u1', monitor, {
      kind: 'verdict',
      verdict: { allowed: false, message: 'no latest tag' },
    });
    assert.deepEqual(r, {
      response: { uid: 'u1', allowed: true, warnings: ['p would deny: no latest tag'] },
      verdict: 'allowed',
    });
  });

  test('a timeout with failurePolicy Fail is denied, saying which generation did not finish in time', () => {
    const r = admissionResponse('u1', protect, { kind: 'timeout', ms: 9500 });
    assert.equal(r.verdict, 'timeout');
    assert.equal(r.response.allowed, false);
    assert.equal(
      r.response.status?.message,
      'policy p generation 2 timed out: did not finish within 9500 ms',
    );
  });

  test('a timeout with failurePolicy Ignore is allowed with a warning', () => {
    const r = admissionResponse('u1', ignore, { kind: 'timeout', ms: 700 });
    assert.equal(r.verdict, 'timeout');
    assert.equal(r.response.allowed, true);
    assert.deepEqual(r.response.warnings, [
      'policy p generation 2 timed out: did not finish within 700 ms (failurePolicy Ignore: allowed)',
    ]);
  });

  test('a run past the cost budget with failurePolicy Fail is denied (500 InternalError), saying so, and counted apart', () => {
    const r = admissionResponse('u1', protect, {
      kind: 'cost',
      budget: 10_000_000,
      used: 10_000_007,
    });
    assert.deepEqual(r, {
      response: {
        uid: 'u1',
        allowed: false,
        status: {
          code: 500,
          message: 'policy p generation 2 exceeded its runtime cost budget 10^7',
          reason: 'InternalError',
        },
      },
      verdict: 'cost',
    });
  });

  test('a run past the cost budget with failurePolicy Ignore, or under Warn, is allowed with a warning', () => {
    const ignored = admissionResponse('u1', ignore, { kind: 'cost', budget: 10_000_000 });
    assert.equal(ignored.verdict, 'cost');
    assert.deepEqual(ignored.response, {
      uid: 'u1',
      allowed: true,
      warnings: [
        'policy p generation 2 exceeded its runtime cost budget 10^7 (failurePolicy Ignore: allowed)',
      ],
    });
    const monitored = admissionResponse('u1', monitor, { kind: 'cost', budget: 2 ** 20 });
    assert.deepEqual(monitored.response.warnings, [
      'p would deny: policy p generation 2 exceeded its runtime cost budget 2^20',
    ]);
  });

  test('a runtime error follows the failurePolicy', () => {
    const fail = admissionResponse('u1', protect, { kind: 'error', message: 'no such key: spec' });
    assert.equal(fail.verdict, 'error');
    assert.equal(fail.response.status?.message, 'policy p generation 2 failed: no such key: spec');
    assert.equal(
      admissionResponse('u1', ignore, { kind: 'error', message: 'x' }).response.allowed,
      true,
    );
  });

  test('Warn never denies, not even on a timeout with failurePolicy Fail', () => {
    const r = admissionResponse('u1', monitor, { kind: 'timeout', ms: 100 });
    assert.equal(r.response.allowed, true);
    assert.equal(r.verdict, 'timeout');
  });

  test('a generation this replica has not loaded answers by the failurePolicy with the reason', () => {
    const message = 'policy p: this replica has not loaded generation 2 (it is still loading)';
    const r = admissionResponse('u1', protect, { kind: 'unavailable', message });
    assert.deepEqual(r.response, {
      uid: 'u1',
      allowed: false,
      status: { code: 500, message, reason: 'InternalError' },
    });
  });
});

describe('validationActions', () => {
  const denial = {
    kind: 'verdict',
    verdict: { allowed: false, message: 'no latest tag' },
  } as const;
  test('Audit admits and annotates the audit event with what failed', () => {
    const r = admissionResponse('u1', { ...protect, actions: ['Audit'] }, denial);
    assert.deepEqual(r, {
      response: {
        uid: 'u1',
        allowed: true,
        auditAnnotations: {
          validation_failure: JSON.stringify([
            { message: 'no latest tag', policy: 'p', generation: 2, validationActions: ['Audit'] },
          ]),
        },
      },
      verdict: 'allowed',
    });
  });
  test('Deny with Audit denies and annotates; Warn with Audit warns and annotates', () => {
    const both = admissionResponse('u1', { ...protect, actions: ['Deny', 'Audit'] }, denial);
    assert.equal(both.response.allowed, false);
    assert.ok(both.response.auditAnnotations?.validation_failure);
    const warned = admissionResponse('u1', { ...protect, actions: ['Warn', 'Audit'] }, denial);
    assert.equal(warned.response.allowed, true);
    assert.deepEqual(warned.response.warnings, ['p would deny: no latest tag']);
    assert.ok(warned.response.auditAnnotations?.validation_failure);
  });
  test('property: only Deny denies; Audit annotates exactly the failures; allowed requests carry neither', () => {
    const actionSets = fc.constantFrom<PolicyAnswerContext['actions']>(
      ['Deny'],
      ['Warn'],
      ['Audit'],
      ['Deny', 'Audit'],
      ['Warn', 'Audit'],
      ['Audit', 'Deny'],
    );
    const outcome = fc.oneof(
      fc.record({
        kind: fc.constant('verdict' as const),
        verdict: fc.record({ allowed: fc.boolean(), message: fc.string() }),
      }),
      fc.record({ kind: fc.constant('error' as const), message: fc.string() }),
      fc.record({ kind: fc.constant('timeout' as const), ms: fc.nat() }),
      fc.record({ kind: fc.constant('cost' as const), budget: fc.nat() }),
      fc.record({ kind: fc.constant('unavailable' as const), message: fc.string() }),
    );
    fc.assert(
      fc.property(
        actionSets,
        fc.constantFrom('Fail' as const, 'Ignore' as const),
        outcome,
        (actions, failurePolicy, o) => {
          const { response } = admissionResponse('u', { ...protect, actions, failurePolicy }, o);
          const failed = o.kind === 'verdict' ? !o.verdict.allowed : failurePolicy === 'Fail';
          assert.equal(response.allowed, !(failed && actions.includes('Deny')));
          assert.equal(
            response.auditAnnotations !== undefined,
            failed && actions.includes('Audit'),
          );
          if (response.auditAnnotations) {
            const [entry] = JSON.parse(response.auditAnnotations.validation_failure!) as {
              policy: string;
            }[];
            assert.equal(entry?.policy, 'p');
          }
        },
      ),
      { numRuns: 500 },
    );
  });
});

describe('every validationActions set × every outcome', () => {
  // What a failure does under each set: a failed validation, or an evaluation that gave no
  // verdict under failurePolicy Fail (as the apiserver's ValidatingAdmissionPolicy).
  const onFailure: Record<string, { allowed: boolean; warns: boolean; audits: boolean }> = {
    Deny: { allowed: false, warns: false, audits: false },
    Warn: { allowed: true, warns: true, audits: false },
    Audit: { allowed: true, warns: false, audits: true },
    'Deny,Audit': { allowed: false, warns: false, audits: true },
    'Warn,Audit': { allowed: true, warns: true, audits: true },
  };
  const outcomes: {
    name: string;
    outcome: Parameters<typeof admissionResponse>[2];
    /** A verdict is never an error to ignore; the other outcomes fail only under Fail. */
    fails: (failurePolicy: 'Fail' | 'Ignore') => boolean;
    label: (denies: boolean) => string;
    code?: number;
  }[] = [
    {
      name: 'a passed validation',
      outcome: { kind: 'verdict', verdict: { allowed: true } },
      fails: () => false,
      label: () => 'allowed',
    },
    {
      name: 'a match condition that excluded the request',
      outcome: { kind: 'verdict', verdict: { allowed: true, skipped: true } },
      fails: () => false,
      label: () => 'allowed',
    },
    {
      name: 'a failed validation',
      outcome: { kind: 'verdict', verdict: { allowed: false, message: 'needs an owner' } },
      fails: () => true,
      label: (denies) => (denies ? 'denied' : 'allowed'),
      code: 403,
    },
    ...(
      [
        ['an expression error', { kind: 'error', message: 'no such key: x' }, 'error'],
        ['a timeout', { kind: 'timeout', ms: 100 }, 'timeout'],
        ['a run past the cost budget', { kind: 'cost', budget: 1000 }, 'cost'],
        ['a generation not loaded here', { kind: 'unavailable', message: 'not loaded' }, 'error'],
      ] as const
    ).map(([name, outcome, label]) => ({
      name,
      outcome,
      fails: (failurePolicy: 'Fail' | 'Ignore') => failurePolicy === 'Fail',
      label: () => label,
      code: 500,
    })),
  ];
  for (const [set, expected] of Object.entries(onFailure))
    for (const o of outcomes)
      for (const failurePolicy of ['Fail', 'Ignore'] as const) {
        const actions = set.split(',') as PolicyAnswerContext['actions'];
        const fails = o.fails(failurePolicy);
        const what = !fails
          ? 'admitted'
          : [
              expected.allowed ? 'admitted' : 'denied',
              expected.warns && 'with a warning',
              expected.audits && 'with an audit annotation',
            ]
              .filter(Boolean)
              .join(' ');
        test(`[${set}] × ${o.name}, failurePolicy ${failurePolicy}: ${what}`, () => {
          const ctx = { ...protect, actions, failurePolicy };
          const r = admissionResponse('u', ctx, o.outcome);
          assert.equal(r.response.allowed, fails ? expected.allowed : true);
          assert.equal(r.verdict, o.label(actions.includes('Deny')));
          assert.equal(r.response.status?.code, fails && !expected.allowed ? o.code : undefined);
          const wouldDeny = (r.response.warnings ?? []).filter((w) =>
            w.startsWith('p would deny: '),
          );
          assert.equal(wouldDeny.length, fails && expected.warns ? 1 : 0);
          assert.equal(r.response.auditAnnotations !== undefined, fails && expected.audits);
          // Ignore admits what gave no verdict with rollcall's usual warning, whatever the set.
          if (o.outcome.kind !== 'verdict' && failurePolicy === 'Ignore')
            assert.match(r.response.warnings?.[0] ?? '', /\(failurePolicy Ignore: allowed\)$/);
        });
      }

  test('the audit annotation names the message, policy, generation and actions, and stays bounded', () => {
    const long = 'x'.repeat(100_000);
    const r = admissionResponse(
      'u',
      { ...protect, actions: ['Warn', 'Audit'] },
      { kind: 'verdict', verdict: { allowed: false, message: long } },
    );
    const annotations = r.response.auditAnnotations ?? {};
    assert.deepEqual(Object.keys(annotations), ['validation_failure']);
    // A qualified name's name part, as the apiserver checks an annotation key.
    assert.match('validation_failure', /^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/);
    const value = annotations.validation_failure ?? '';
    assert.ok(value.length < 5_000, `${value.length} characters`);
    const [entry, ...rest] = JSON.parse(value) as Record<string, unknown>[];
    assert.deepEqual(rest, []);
    assert.deepEqual(
      { ...entry, message: String(entry?.message).length },
      { message: 4096, policy: 'p', generation: 2, validationActions: ['Warn', 'Audit'] },
    );
    assert.ok((r.response.warnings?.[0]?.length ?? 0) <= 512, 'the warning is bounded too');
  });
});
