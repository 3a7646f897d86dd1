// The policy server's audit batches: each object × Policy judged by admission's own path (the
// real engine, inline), its OpenReports result; admission first; a hostile batch is a 400,
// never a crash.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { AUDIT_MAX_ITEMS, AUDIT_RESULTS, type AuditVerdict } from '../../../api/audit.ts';
import type { ValidationAction } from '../../../api/v1alpha1.ts';
import { review, type AdmissionDeps } from '../../../data-plane/admission.ts';
import {
  auditBatch,
  AuditQueue,
  readBatch,
  reviewOf,
  verdictOf,
  type AuditDeps,
} from '../../../data-plane/audit.ts';
import { InlineEvaluator } from '../../../data-plane/inline.ts';
import { parseReview } from '../../../data-plane/review.ts';
import type { AdmissionResponse, PolicyAnswerContext } from '../../../data-plane/verdict.ts';

const code = {
  matchConditions: [{ name: 'not-skipped', expression: "!('skip' in object.metadata.labels)" }],
  validations: [
    { expression: "'owner' in object.metadata.labels", message: 'needs an owner label' },
    // A dry-run CREATE by the audit's user: what a policy reading the request sees.
    {
      expression:
        "request.operation == 'CREATE' && request.dryRun && request.userInfo.username == 'rollcall:audit' && oldObject == null",
      message: 'not judged as a dry-run CREATE',
    },
  ],
};
const specOf = (validationActions: readonly string[]) => ({
  policyServer: 'default',
  rules: [],
  settings: {},
  failurePolicy: 'Fail',
  timeoutSeconds: 2,
  mode: 'protect',
  validationActions,
});

/** Admission's deps over the real engine: `actions` by policy, generation 1 loaded. */
function admissionDeps(
  actions: Record<string, readonly string[]>,
  loaded = (g: number): boolean => g === 1,
): AdmissionDeps {
  const evaluator = new InlineEvaluator();
  return {
    target: (policy, generation) =>
      !(policy in actions)
        ? { kind: 'unknown' }
        : loaded(generation)
          ? {
              kind: 'loaded',
              key: `${policy}/${generation}`,
              spec: specOf(actions[policy]!) as never,
              code,
            }
          : {
              kind: 'unavailable',
              message: `policy ${policy}: this replica has not loaded generation ${generation}`,
              failurePolicy: 'Fail',
              actions: ['Deny'],
            },
    evaluate: () => Promise.reject(new Error('the pool is not used here')),
    inline: (job) => evaluator.evaluate(job),
  };
}

function deps(
  actions: Record<string, readonly string[]>,
  loaded?: (g: number) => boolean,
): AuditDeps & { seen: string[]; held: number; most: number } {
  const d = {
    seen: [] as string[],
    held: 0,
    most: 0,
    admission: admissionDeps(actions, loaded),
    enter: () => {
      d.most = Math.max(d.most, ++d.held);
      return { release: () => void d.held-- };
    },
    evaluated: (policy: string) => void d.seen.push(policy),
  };
  return d;
}

const cm = (name: string, labels: Record<string, string>) => ({
  apiVersion: 'v1',
  kind: 'ConfigMap',
  metadata: { name, namespace: 'team-a', labels },
});
const twoPolicies = [
  { name: 'audit', generation: 1 },
  { name: 'warn', generation: 1 },
];
const batch = (items: { object: unknown; policies: unknown }[], policies: unknown = twoPolicies) =>
  JSON.stringify({
    resource: { group: '', version: 'v1', resource: 'configmaps' },
    kind: { group: '', version: 'v1', kind: 'ConfigMap' },
    policies,
    items,
  });
const resultsOf = (answer: { body: unknown }) =>
  (answer.body as { results: AuditVerdict[][] }).results;

describe('POST /audit', () => {
  test('pass, fail (Audit or Deny), warn (Warn only) and skip, in the order asked', async () => {
    const d = deps({ audit: ['Audit'], warn: ['Warn'] });
    const answer = await auditBatch(
      batch([
        { object: cm('ok', { owner: 'x' }), policies: [0, 1] },
        { object: cm('bad', {}), policies: [1, 0] },
        { object: cm('skipped', { skip: '' }), policies: [0] },
      ]),
      d,
    );
    assert.deepEqual(answer, {
      status: 200,
      body: {
        results: [
          [{ result: 'pass' }, { result: 'pass' }],
          [
            { result: 'warn', message: 'needs an owner label' },
            { result: 'fail', message: 'needs an owner label' },
          ],
          [{ result: 'skip' }],
        ],
      },
    });
    assert.deepEqual(d.seen, ['audit', 'warn', 'warn', 'audit', 'audit']);
    assert.equal(d.most, 1, 'one pair at a time');
    assert.equal(d.held, 0, 'every slot released');
  });

  test('a generation not loaded here, or a policy not assigned here, is asked again later, unevaluated', async () => {
    const d = deps({ audit: ['Deny'] });
    const answer = await auditBatch(
      batch(
        [{ object: cm('a', {}), policies: [0, 1] }],
        [
          { name: 'audit', generation: 2 },
          { name: 'nobody', generation: 1 },
        ],
      ),
      d,
    );
    assert.deepEqual(resultsOf(answer), [
      [
        {
          result: 'error',
          message: 'policy audit: this replica has not loaded generation 2',
          retry: true,
        },
        {
          result: 'error',
          message: 'policy nobody is not assigned to this policy server (or was deleted)',
          retry: true,
        },
      ],
    ]);
    assert.deepEqual(d.seen, []);
  });

  test('once the replica is busy with admission, the batch stops: the rest is retry, unevaluated', async () => {
    const d = deps({ audit: ['Deny'], warn: ['Warn'] });
    let room = 1;
    const answer = await auditBatch(
      batch([
        { object: cm('a', {}), policies: [0, 1] },
        { object: cm('b', {}), policies: [0] },
      ]),
      {
        ...d,
        enter: (policy) => (room-- > 0 ? d.enter(policy) : { overloaded: 'busy' }),
      },
    );
    assert.deepEqual(resultsOf(answer), [
      [
        { result: 'fail', message: 'needs an owner label' },
        { result: 'error', message: 'busy', retry: true },
      ],
      [{ result: 'error', message: 'busy', retry: true }],
    ]);
    assert.deepEqual(d.seen, ['audit']);
  });

  test('a batch past its time budget answers the rest retry', async () => {
    const d = deps({ audit: ['Audit'] });
    let clock = 0;
    const answer = await auditBatch(
      batch(Array.from({ length: 5 }, (_, i) => ({ object: cm(`o${i}`, {}), policies: [0] }))),
      { ...d, budgetMs: 100, now: () => (clock += 40) },
    );
    const results = resultsOf(answer).map(([r]) => (r?.retry ? 'retry' : r?.result));
    assert.deepEqual(results, ['fail', 'fail', 'retry', 'retry', 'retry']);
    assert.match(resultsOf(answer)[2]![0]!.message ?? '', /audit budget \(100 ms\)/);
  });

  test('an empty batch is an empty answer', async () => {
    const answer = await auditBatch(batch([]), deps({}));
    assert.deepEqual(answer, { status: 200, body: { results: [] } });
  });

  test('bad batches are 400 with what is wrong', async () => {
    const d = deps({ audit: ['Deny'] });
    const huge = Array.from({ length: AUDIT_MAX_ITEMS + 1 }, () => ({
      object: cm('a', {}),
      policies: [0],
    }));
    for (const [body, says] of [
      ['not json', /^the audit batch is not JSON$/],
      ['{}', /^not an audit batch: resource: /],
      ['[]', /^not an audit batch: \(the batch\): /],
      ['null', /^not an audit batch/],
      [batch([{ object: cm('a', {}), policies: [7] }]), /items\[0\]\.policies: index 7 is past/],
      [batch([{ object: cm('a', {}), policies: [-1] }]), /items\.0\.policies\.0/],
      [batch([{ object: cm('a', {}), policies: [0.5] }]), /items\.0\.policies\.0/],
      [batch([{ object: cm('a', {}), policies: [1, 1] }]), /index appears twice/],
      [batch([{ object: cm('a', {}), policies: [] }]), /items\.0\.policies/],
      [batch([{ object: 'text', policies: [0] }]), /items\.0\.object/],
      [batch([{ object: [1, 2], policies: [0] }]), /items\.0\.object/],
      [batch([{ object: { metadata: { name: '' } }, policies: [0] }]), /metadata\.name/],
      [batch([{ object: { metadata: { name: 3 } }, policies: [0] }]), /metadata\.name/],
      [batch([{ object: cm('a', {}), policies: [0] }], []), /policies/],
      [
        batch([{ object: cm('a', {}), policies: [0] }], [{ name: 'a', generation: 0 }]),
        /generation/,
      ],
      [batch(huge), /items/],
      [JSON.stringify({ ...JSON.parse(batch([])), extra: 1 }), /extra/],
    ] as const) {
      const answer = await auditBatch(body, d);
      assert.equal(answer.status, 400, body.slice(0, 80));
      assert.match((answer.body as { error: string }).error, says, body.slice(0, 80));
    }
    assert.deepEqual(d.seen, []);
  });

  test('property: any body is a 400 or one result per pair, each a known result; never a throw', async () => {
    const d = deps({ audit: ['Audit'], warn: ['Warn'] });
    const object = fc.oneof(
      fc.anything(),
      fc.record({
        metadata: fc.record(
          { name: fc.string(), namespace: fc.anything(), labels: fc.anything() },
          { requiredKeys: ['name'] },
        ),
      }),
      fc.dictionary(fc.string(), fc.string()).map((labels) => cm('x', labels)),
    );
    const items = fc.array(
      fc.record({
        object,
        policies: fc.oneof(
          fc.array(fc.integer({ min: -1, max: 3 }), { maxLength: 3 }),
          fc.anything(),
        ),
      }),
      { maxLength: 5 },
    );
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.json(),
          fc.string(),
          items.map((i) => batch(i)),
        ),
        async (body) => {
          const answer = await auditBatch(body, d);
          if (answer.status === 400) {
            assert.equal(typeof (answer.body as { error: unknown }).error, 'string');
            return;
          }
          assert.equal(answer.status, 200);
          const request = JSON.parse(body) as { items: { policies: number[] }[] };
          const results = resultsOf(answer);
          assert.deepEqual(
            results.map((r) => r.length),
            request.items.map((i) => i.policies.length),
          );
          for (const r of results.flat()) assert.ok(AUDIT_RESULTS.includes(r.result));
        },
      ),
      { numRuns: 400 },
    );
    assert.equal(d.held, 0);
  });

  test('property: the audit judges as admission answers the same request', async () => {
    const sets: ValidationAction[][] = [
      ['Deny'],
      ['Warn'],
      ['Audit'],
      ['Deny', 'Audit'],
      ['Warn', 'Audit'],
    ];
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...sets),
        fc.dictionary(fc.constantFrom('owner', 'skip', 'team'), fc.string(), { maxKeys: 3 }),
        async (actions, labels) => {
          const admission = admissionDeps({ p: actions });
          const object = cm('x', labels);
          const [[verdict]] = resultsOf(
            await auditBatch(batch([{ object, policies: [0] }], [{ name: 'p', generation: 1 }]), {
              admission,
              enter: () => ({ release: () => {} }),
              evaluated: () => {},
            }),
          ) as [[AuditVerdict]];
          const text = reviewOf(
            {
              kind: { group: '', version: 'v1', kind: 'ConfigMap' },
              resource: { group: '', version: 'v1', resource: 'configmaps' },
            },
            object.metadata,
            JSON.stringify(object),
            0,
          );
          const answered = await review(text, 'p', 1, admission);
          const response = (answered.body as { response: AdmissionResponse }).response;
          const failed =
            !response.allowed ||
            response.auditAnnotations !== undefined ||
            (response.warnings ?? []).some((w) => w.startsWith('p would deny: '));
          assert.equal(['fail', 'warn'].includes(verdict.result), failed);
          if (!response.allowed) assert.equal(verdict.result, 'fail');
          if (verdict.result === 'warn') assert.deepEqual(actions, ['Warn']);
        },
      ),
      { numRuns: 200 },
    );
  });
});

describe('an audit pair as a review', () => {
  const request = {
    kind: { group: 'apps', version: 'v1', kind: 'Deployment' },
    resource: { group: 'apps', version: 'v1', resource: 'deployments' },
  };

  test('is a dry-run CREATE by rollcall:audit of the object as sent, with no oldObject', () => {
    const object = {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: 'web', namespace: 'a' },
    };
    const parsed = parseReview(reviewOf(request, object.metadata, JSON.stringify(object), 7));
    assert.ok(parsed.ok);
    assert.deepEqual(parsed.request, {
      uid: 'rollcall-audit-7',
      kind: request.kind,
      resource: request.resource,
      requestKind: request.kind,
      requestResource: request.resource,
      name: 'web',
      namespace: 'a',
      operation: 'CREATE',
      userInfo: { username: 'rollcall:audit' },
      oldObject: null,
      dryRun: true,
      options: { apiVersion: 'meta.k8s.io/v1', kind: 'CreateOptions' },
      object,
    });
  });

  test('a cluster-scoped object has no namespace', () => {
    const parsed = parseReview(reviewOf(request, { name: 'n' }, '{"metadata":{"name":"n"}}', 0));
    assert.ok(parsed.ok);
    assert.equal('namespace' in parsed.request, false);
  });

  test('property: any object and name survive the review intact', () => {
    fc.assert(
      fc.property(
        fc.jsonValue(),
        fc.string({ minLength: 1 }),
        fc.option(fc.string()),
        (value, name, ns) => {
          const metadata = { name, ...(ns !== null && { namespace: ns }) };
          const object = { value, metadata };
          const parsed = parseReview(reviewOf(request, metadata, JSON.stringify(object), 0));
          assert.ok(parsed.ok);
          assert.deepEqual(parsed.request.object, JSON.parse(JSON.stringify(object)));
          assert.equal(parsed.request.name, name);
        },
      ),
    );
  });
});

describe('the result of a judged pair', () => {
  const ctx = (actions: ValidationAction[]): PolicyAnswerContext => ({
    policy: 'p',
    generation: 3,
    actions,
    failurePolicy: 'Fail',
  });
  const denied = { kind: 'verdict', verdict: { allowed: false, message: 'm' } } as const;
  const cases: [string, ValidationAction[], Parameters<typeof verdictOf>[1], AuditVerdict][] = [
    ['passes', ['Deny'], { kind: 'verdict', verdict: { allowed: true } }, { result: 'pass' }],
    [
      'is skipped',
      ['Deny'],
      { kind: 'verdict', verdict: { allowed: true, skipped: true } },
      { result: 'skip' },
    ],
    ['fails under Deny', ['Deny'], denied, { result: 'fail', message: 'm' }],
    ['fails under Audit', ['Audit'], denied, { result: 'fail', message: 'm' }],
    ['fails under Warn with Audit', ['Warn', 'Audit'], denied, { result: 'fail', message: 'm' }],
    ['warns under Warn alone', ['Warn'], denied, { result: 'warn', message: 'm' }],
    [
      'without a message names the policy',
      ['Deny'],
      { kind: 'verdict', verdict: { allowed: false } },
      { result: 'fail', message: 'denied by policy p generation 3' },
    ],
    [
      'errs',
      ['Warn'],
      { kind: 'error', message: 'no such key: x' },
      { result: 'error', message: 'policy p generation 3 failed: no such key: x' },
    ],
    [
      'times out',
      ['Deny'],
      { kind: 'timeout', ms: 500 },
      { result: 'error', message: 'policy p generation 3 timed out: did not finish within 500 ms' },
    ],
    [
      'runs past its budget',
      ['Audit'],
      { kind: 'cost', budget: 1000 },
      { result: 'error', message: 'policy p generation 3 exceeded its runtime cost budget 1000' },
    ],
    [
      'is not loaded here (retry)',
      ['Deny'],
      { kind: 'unavailable', message: 'not loaded' },
      { result: 'error', message: 'not loaded', retry: true },
    ],
  ];
  for (const [name, actions, outcome, expected] of cases)
    test(`[${actions.join(',')}] ${name}`, () =>
      assert.deepEqual(verdictOf(ctx(actions), outcome), expected));

  test('a message is kept to a Report’s 1024 characters', () => {
    const long = {
      kind: 'verdict',
      verdict: { allowed: false, message: 'x'.repeat(5000) },
    } as const;
    assert.equal(verdictOf(ctx(['Deny']), long).message?.length, 1024);
  });
});

describe('reading a batch', () => {
  test('keeps each object as sent, even a key the schema would not copy', () => {
    const body = `{"resource":{"group":"","version":"v1","resource":"configmaps"},"kind":{"group":"","version":"v1","kind":"ConfigMap"},"policies":[{"name":"p","generation":1}],"items":[{"object":{"metadata":{"name":"a"},"__proto__":{"x":1}},"policies":[0]}]}`;
    const read = readBatch(body);
    assert.ok(read.ok);
    assert.deepEqual(JSON.parse(read.objects[0]!), JSON.parse(body).items[0].object);
    assert.equal(read.objects[0], '{"metadata":{"name":"a"},"__proto__":{"x":1}}');
  });
});

describe('the audit queue', () => {
  test('runs one batch at a time, in order, and refuses one more than it lets wait', async () => {
    const queue = new AuditQueue(2);
    const order: string[] = [];
    let release!: () => void;
    const first = queue.run(async () => {
      order.push('first starts');
      await new Promise<void>((r) => (release = r));
      order.push('first ends');
      return 1;
    });
    const second = queue.run(async () => void order.push('second'));
    const third = queue.run(async () => void order.push('third'));
    assert.equal(queue.full, true);
    assert.equal(await queue.run(async () => 'refused'), undefined);
    await new Promise((r) => setImmediate(r));
    release();
    assert.equal(await first, 1);
    await Promise.all([second, third]);
    assert.deepEqual(order, ['first starts', 'first ends', 'second', 'third']);
    assert.equal(queue.full, false);
    assert.equal(await queue.run(async () => 'again'), 'again');
  });

  test('a batch that throws hands the turn on', async () => {
    const queue = new AuditQueue(1);
    const failing = queue.run(async () => {
      throw new Error('boom');
    });
    const next = queue.run(async () => 'next');
    await assert.rejects(failing, /boom/);
    assert.equal(await next, 'next');
  });
});
