// The inline path (main thread) against the pool path (threads): same policies, same reviews,
// the same outcomes; and what goes to the pool instead.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { review as answerAdmission } from '../../../data-plane/admission.ts';
import type { EvalPolicy } from '../../../data-plane/evaluation.ts';
import { INLINE_COST_BUDGET, InlineEvaluator } from '../../../data-plane/inline.ts';
import { EvaluationPool, type PoolJob } from '../../../data-plane/pool.ts';

const reviewOf = (request: Record<string, unknown>) =>
  JSON.stringify({
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: { uid: 'r1', operation: 'CREATE', namespace: 'team-a', ...request },
  });

const pod = (metadata: Record<string, unknown>, spec: Record<string, unknown> = {}) =>
  reviewOf({ object: { apiVersion: 'v1', kind: 'Pod', metadata, spec } });

const policy = (
  code: Record<string, unknown>,
  failurePolicy: 'Fail' | 'Ignore' = 'Fail',
  params: unknown = null,
): EvalPolicy => ({ code, params, failurePolicy });

const one = (expression: string, extra: Record<string, unknown> = {}) => ({
  validations: [{ expression, ...extra }],
});

const namespace = JSON.stringify({ metadata: { name: 'team-a', labels: { tier: 'gold' } } });

/** [name, policy, review, namespace JSON]: each answered the same way by both paths. */
const cases: [string, EvalPolicy, string, string | null][] = [
  ['an allowed request', policy(one("object.metadata.name != 'x'")), pod({ name: 'a' }), null],
  [
    'a denial with its message, reason and code',
    policy(one("object.metadata.name != 'x'", { message: 'no x', reason: 'Forbidden' })),
    pod({ name: 'x' }),
    null,
  ],
  [
    'a denial with a messageExpression',
    policy(
      one("object.metadata.name != 'x'", { messageExpression: "'name ' + object.metadata.name" }),
    ),
    pod({ name: 'x' }),
    null,
  ],
  [
    'JSON integers are int64',
    policy(one('object.spec.replicas + 1 == 3')),
    reviewOf({ object: { spec: { replicas: 2 } } }),
    null,
  ],
  [
    'an int64 overflow is an evaluation error',
    policy(one('object.spec.n * 4 > 0')),
    reviewOf({ object: { spec: { n: 4611686018427387904 } } }),
    null,
  ],
  [
    'a missing key fails with failurePolicy Fail',
    policy(one('object.spec.nope == 1')),
    pod({ name: 'a' }),
    null,
  ],
  [
    'a missing key is skipped with failurePolicy Ignore',
    policy(one('object.spec.nope == 1'), 'Ignore'),
    pod({ name: 'a' }),
    null,
  ],
  [
    'settings are params',
    policy(one('size(object.spec.containers) <= params.max'), 'Fail', { max: 1 }),
    pod({ name: 'a' }, { containers: [{ name: 'a' }, { name: 'b' }] }),
    null,
  ],
  [
    'the namespaceObject',
    policy(one("namespaceObject.metadata.labels.tier == 'gold'")),
    pod({ name: 'a' }),
    namespace,
  ],
  [
    'a comprehension and a literal regular expression',
    policy(one("object.spec.containers.all(c, c.image.matches('^registry\\\\.example/'))")),
    pod(
      { name: 'a' },
      { containers: [{ image: 'registry.example/app' }, { image: 'docker.io/x' }] },
    ),
    null,
  ],
  [
    'variables and match conditions',
    policy({
      matchConditions: [{ name: 'pods', expression: "object.kind == 'Pod'" }],
      variables: [{ name: 'images', expression: 'object.spec.containers.map(c, c.image)' }],
      validations: [{ expression: "!('bad' in variables.images)" }],
    }),
    pod({ name: 'a' }, { containers: [{ image: 'bad' }] }),
    null,
  ],
  ['a review that is not an AdmissionReview', policy(one('true')), '{"kind":"Pod"}', null],
  [
    'a review without a uid',
    policy(one('true')),
    JSON.stringify({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request: {} }),
    null,
  ],
];

const job = (
  key: string,
  evalPolicy: EvalPolicy,
  review: string,
  ns: string | null = null,
): PoolJob => ({
  key,
  policy: evalPolicy,
  review,
  namespace: ns,
});

describe('the inline path', () => {
  const pool = new EvaluationPool({ size: 1, max: 2 });
  after(() => pool.close());

  describe('answers as the pool does', () => {
    const inline = new InlineEvaluator();
    cases.forEach(([name, evalPolicy, review, ns], i) => {
      test(name, async () => {
        const j = job(`case-${i}/1`, evalPolicy, review, ns);
        const here = inline.evaluate(j);
        assert.ok(here, 'evaluated inline');
        assert.deepEqual(here, await pool.evaluate(j, 5000));
      });
    });
  });

  test('a review over the size limit goes to the pool', () => {
    const inline = new InlineEvaluator();
    const small = pod({ name: 'a' });
    const large = pod({ name: 'a', annotations: { big: 'x'.repeat(40 * 1024) } });
    const p = policy(one("object.metadata.name != 'x'"));
    assert.ok(inline.evaluate(job('p/1', p, small)));
    assert.equal(inline.evaluate(job('p/1', p, large)), undefined);
  });

  test('the size limit counts bytes, not characters', () => {
    const inline = new InlineEvaluator({ maxBodyBytes: 400 });
    const p = policy(one('true'));
    const ascii = pod({ name: 'a', annotations: { note: 'e'.repeat(150) } });
    const accented = pod({ name: 'a', annotations: { note: 'é'.repeat(150) } });
    assert.equal(ascii.length, accented.length);
    assert.ok(inline.evaluate(job('p/1', p, ascii)));
    assert.equal(inline.evaluate(job('p/1', p, accented)), undefined);
  });

  test('the Namespace counts toward the size limit', () => {
    const inline = new InlineEvaluator({ maxBodyBytes: 1024 });
    const p = policy(one("namespaceObject.metadata.name != ''"));
    const review = pod({ name: 'a' });
    const large = JSON.stringify({ metadata: { name: 'a', annotations: { a: 'x'.repeat(1024) } } });
    assert.ok(inline.evaluate(job('p/1', p, review, namespace)));
    assert.equal(inline.evaluate(job('p/1', p, review, large)), undefined);
  });

  test('a generation whose settings are larger than the limit goes to the pool', () => {
    const reasons: string[] = [];
    const inline = new InlineEvaluator({
      maxBodyBytes: 1024,
      onClassified: (_key, bound) => reasons.push(bound.bounded ? 'bounded' : bound.reason),
    });
    const items = Array.from({ length: 500 }, (_, i) => i);
    const p = policy(one('params.items.all(i, i >= 0)'), 'Fail', { items });
    assert.equal(inline.evaluate(job('p/1', p, pod({ name: 'a' }))), undefined);
    assert.match(reasons[0]!, /its settings take \d+ bytes, more than the limit/);
  });

  test('a limit of 0 sends everything to the pool', () => {
    const inline = new InlineEvaluator({ maxBodyBytes: 0 });
    assert.equal(inline.evaluate(job('p/1', policy(one('true')), pod({ name: 'a' }))), undefined);
  });

  test('a policy that is not bounded goes to the pool, classified once per generation', () => {
    const classified: [string, boolean][] = [];
    const inline = new InlineEvaluator({
      onClassified: (key, bound) => classified.push([key, bound.bounded]),
    });
    const nested = policy(
      one('object.spec.containers.all(a, object.spec.containers.all(b, a == b))'),
    );
    const review = pod({ name: 'a' }, { containers: [{ name: 'a' }] });
    assert.equal(inline.evaluate(job('nested/1', nested, review)), undefined);
    assert.equal(inline.evaluate(job('nested/1', nested, review)), undefined);
    assert.ok(inline.evaluate(job('flat/1', policy(one('true')), review)));
    assert.deepEqual(classified, [
      ['nested/1', false],
      ['flat/1', true],
    ]);
  });

  test('a request past the inline cost budget goes to the pool, and so does its generation from then on, told once', async () => {
    const told: [string, string][] = [];
    const inline = new InlineEvaluator({
      costBudget: 1000,
      onClassified: (key, bound) => told.push([key, bound.bounded ? 'bounded' : bound.reason]),
    });
    const p = policy(one('object.spec.items.all(i, i >= 0)'));
    const items = (n: number) =>
      pod({ name: 'a' }, { items: Array.from({ length: n }, (_, i) => i) });
    const cheap = inline.evaluate(job('loop/1', p, items(3)));
    assert.equal(cheap?.kind === 'verdict' && cheap.verdict.allowed, true);
    assert.equal(inline.evaluate(job('loop/1', p, items(500))), undefined);
    assert.equal(inline.evaluate(job('loop/1', p, items(3))), undefined, 'pool-only now');
    assert.deepEqual(told, [
      ['loop/1', 'bounded'],
      ['loop/1', 'a request ran past the inline cost budget 1000'],
    ]);
    // The pool evaluates it under the full budget.
    const pooled = await pool.evaluate(job('loop/1', p, items(500)), 5000);
    assert.equal(pooled.kind === 'verdict' && pooled.verdict.allowed, true);
  });

  test('the inline cost budget is 10^5 units by default', () => {
    assert.equal(INLINE_COST_BUDGET, 100_000);
  });

  describe('a doubling chain the cost analysis calls bounded', () => {
    const doubling = {
      variables: [
        { name: 'v0', expression: '[object.metadata.name]' },
        ...Array.from({ length: 30 }, (_, i) => ({
          name: `v${i + 1}`,
          expression: `variables.v${i} + variables.v${i}`,
        })),
      ],
      validations: [{ expression: 'size(variables.v30) > 0' }],
    };
    let keys = 0;
    const served = (failurePolicy: 'Fail' | 'Ignore') => {
      const inline = new InlineEvaluator();
      const key = `doubling-${++keys}/1`;
      const spec = { failurePolicy, mode: 'protect', timeoutSeconds: 10, settings: null };
      let pooled = 0;
      return {
        pooled: () => pooled,
        deps: {
          target: () => ({ kind: 'loaded' as const, key, spec: spec as never, code: doubling }),
          evaluate: (j: PoolJob, ms: number) => {
            pooled++;
            return pool.evaluate(j, ms);
          },
          inline: (j: PoolJob) => inline.evaluate(j),
        },
      };
    };

    test('is stopped inline within a few milliseconds and answered by the pool, by failurePolicy Fail, saying why', async () => {
      const { deps, pooled } = served('Fail');
      const started = performance.now();
      const result = await answerAdmission(pod({ name: 'a' }), 'chain', 1, deps);
      assert.ok(performance.now() - started < 2000);
      assert.equal(pooled(), 1);
      assert.equal(result.path, 'pool');
      assert.equal(result.verdict, 'cost');
      assert.deepEqual((result.body as { response: unknown }).response, {
        uid: 'r1',
        allowed: false,
        status: {
          code: 500,
          message: 'policy chain generation 1 exceeded its runtime cost budget 10^7',
          reason: 'InternalError',
        },
      });
      // Later requests of the generation go to the pool at once.
      await answerAdmission(pod({ name: 'b' }), 'chain', 1, deps);
      assert.equal(pooled(), 2);
    });

    test('with failurePolicy Ignore, is allowed with a warning that says so', async () => {
      const { deps } = served('Ignore');
      const result = await answerAdmission(pod({ name: 'a' }), 'chain', 1, deps);
      assert.equal(result.verdict, 'cost');
      assert.deepEqual((result.body as { response: unknown }).response, {
        uid: 'r1',
        allowed: true,
        warnings: [
          'policy chain generation 1 exceeded its runtime cost budget 10^7 (failurePolicy Ignore: allowed)',
        ],
      });
    });

    test('blocks the main thread briefly, compiling included', () => {
      const inline = new InlineEvaluator();
      const j = job('blocking/1', policy(doubling), pod({ name: 'a' }));
      const started = performance.now();
      assert.equal(inline.evaluate(j), undefined);
      const took = performance.now() - started;
      // ~5-10 ms here (the evaluation stopped at 10^5 units: 1-2 ms); generous for CI.
      assert.ok(took < 200, `blocked ${took.toFixed(1)} ms`);
    });
  });

  test('a policy that does not compile goes to the pool, which says so', async () => {
    const inline = new InlineEvaluator();
    const typo = job('typo/1', policy(one("objekt.metadata.name != ''")), pod({ name: 'a' }));
    assert.equal(inline.evaluate(typo), undefined);
    const outcome = await pool.evaluate(typo, 5000);
    assert.equal(outcome.kind, 'error');
  });
});
