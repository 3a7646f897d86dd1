// The pool with the real CEL engine: the expensive and catastrophic cases of issue 14.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { EvaluationPool, type PoolJob, type PoolOutcome } from '../../../data-plane/pool.ts';

const pod = (name: string) => ({
  uid: 'r1',
  operation: 'CREATE',
  object: {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, labels: { team: 'a' } },
    spec: { containers: [] },
  },
});

const job = (key: string, expression: string, request: unknown, params: unknown = {}): PoolJob => ({
  key,
  policy: {
    code: { validations: [{ expression, message: `${key} says no` }] },
    params,
    failurePolicy: 'Fail',
  },
  review: JSON.stringify({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request }),
  namespace: null,
});

/** The outcome with its verdict's cost checked (a small positive number) and taken out. */
function costless(outcome: PoolOutcome): unknown {
  if (outcome.kind !== 'verdict') return outcome;
  const { cost, ...verdict } = outcome.verdict;
  assert.ok(typeof cost === 'number' && cost > 0 && cost < 1000, `cost ${cost}`);
  return { ...outcome, verdict };
}

describe('evaluation with the CEL engine', () => {
  const pool = new EvaluationPool({ size: 2, max: 6 });
  after(() => pool.close());

  test('evaluates a policy and caches it per key', async () => {
    const labelled = job(
      'labels/1',
      "has(object.metadata.labels) && 'team' in object.metadata.labels",
      pod('x'),
    );
    assert.deepEqual(costless(await pool.evaluate(labelled, 5000)), {
      kind: 'verdict',
      uid: 'r1',
      verdict: { allowed: true },
    });
    const denied = await pool.evaluate(
      job('name/1', "object.metadata.name != 'x'", pod('x')),
      5000,
    );
    assert.deepEqual(costless(denied), {
      kind: 'verdict',
      uid: 'r1',
      verdict: { allowed: false, message: 'name/1 says no', reason: 'Invalid', code: 422 },
    });
  });

  test('JSON integers are int64: object fields do integer arithmetic', async () => {
    const request = { ...pod('x'), object: { spec: { replicas: 2 } } };
    const outcome = await pool.evaluate(
      job('int/1', 'object.spec.replicas + 1 == 3', request),
      5000,
    );
    assert.deepEqual(costless(outcome), { kind: 'verdict', uid: 'r1', verdict: { allowed: true } });
  });

  test('namespaceObject is the Namespace sent as JSON, with int64 integers', async () => {
    const namespace = JSON.stringify({
      metadata: { name: 'team-a', labels: { env: 'prod' } },
      n: 2,
    });
    const outcome = await pool.evaluate(
      {
        ...job(
          'ns/1',
          "namespaceObject.metadata.labels.env == 'prod' && namespaceObject.n + 1 == 3",
          pod('x'),
        ),
        namespace,
      },
      5000,
    );
    assert.deepEqual(costless(outcome), { kind: 'verdict', uid: 'r1', verdict: { allowed: true } });
  });

  test('a body that is not an AdmissionReview v1 is answered invalid, saying why', async () => {
    const outcome = await pool.evaluate(
      { ...job('cheap/1', "object.metadata.name != 'y'", pod('x')), review: '{"kind":"Pod"}' },
      5000,
    );
    assert.equal(outcome.kind, 'invalid');
    assert.match(
      outcome.kind === 'invalid' ? outcome.message : '',
      /^expected an admission.k8s.io\/v1 AdmissionReview with request.uid: apiVersion: expected "admission.k8s.io\/v1", got undefined; kind: expected "AdmissionReview", got "Pod"; request: expected an object, got undefined$/,
    );
  });

  test('a triple nested comprehension over a large list stops at the cost budget, well before its deadline', async () => {
    const items = Array.from({ length: 2000 }, (_, i) => i);
    const expensive = job(
      'expensive/1',
      'params.items.all(a, params.items.all(b, params.items.all(c, a + b + c >= 0)))',
      pod('x'),
      { items },
    );
    const started = Date.now();
    const outcome = await pool.evaluate(expensive, 5000);
    const took = Date.now() - started;
    assert.equal(outcome.kind, 'cost');
    assert.equal(outcome.kind === 'cost' && outcome.budget, 10_000_000);
    assert.ok(took < 2000, `stopped after ${took} ms`);
  });

  test('a backtracking regular expression, which the meter cannot interrupt, is cut off at its deadline while another policy answers fast', async () => {
    // A backreference: V8's linear engine cannot take over, so one match runs for minutes.
    const expensive = job('backreference/1', "object.metadata.name.matches('^(a*)*\\\\1b')", {
      ...pod('a'.repeat(2000)),
    });
    const started = Date.now();
    const slow = pool.evaluate(expensive, 1000);
    const fast: number[] = [];
    for (let i = 0; i < 10; i++) {
      const t = performance.now();
      const outcome = await pool.evaluate(
        job('cheap/1', "object.metadata.name != 'y'", pod('x')),
        5000,
      );
      assert.equal(outcome.kind, 'verdict');
      fast.push(performance.now() - t);
      await new Promise((r) => setTimeout(r, 20));
    }
    assert.deepEqual(await slow, { kind: 'timeout', ms: 1000 });
    const took = Date.now() - started;
    assert.ok(took >= 990 && took < 3000, `cut off after ${took} ms`);
    assert.ok(
      Math.max(...fast) < 800,
      `the cheap policy took ${fast.map((f) => f.toFixed(1)).join(', ')} ms`,
    );
  });

  test('a catastrophic regular expression answers quickly instead of stalling (linear fallback engine)', async () => {
    const name = `${'a'.repeat(32)}!`;
    const started = Date.now();
    const outcome = await pool.evaluate(
      job('redos/1', "object.metadata.name.matches('^(a+)+$')", pod(name)),
      5000,
    );
    assert.equal(outcome.kind, 'verdict');
    assert.equal(outcome.kind === 'verdict' && outcome.verdict.allowed, false);
    assert.ok(Date.now() - started < 1000, `took ${Date.now() - started} ms`);
  });

  test('a runtime error with failurePolicy Fail is an error outcome', async () => {
    const outcome = await pool.evaluate(
      job('err/1', 'object.spec.nothing.deeper == 1', pod('x')),
      5000,
    );
    assert.equal(outcome.kind, 'error');
  });
});
