import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { deadlineMs, review, type AdmissionDeps } from '../../../data-plane/admission.ts';
import { InlineEvaluator } from '../../../data-plane/inline.ts';
import { EvaluationPool, type PoolJob, type PoolOutcome } from '../../../data-plane/pool.ts';

const body = (extra: Record<string, unknown> = {}) =>
  JSON.stringify({
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: { uid: 'req-1', operation: 'CREATE', object: { metadata: { name: 'x' } }, ...extra },
  });

const spec = {
  policyServer: 'default',
  rules: [],
  settings: { max: 3 },
  failurePolicy: 'Fail',
  timeoutSeconds: 2,
  mode: 'protect',
} as const;

const code = { validations: [{ expression: "namespaceObject.metadata.name != 'kube-system'" }] };

function deps(
  answer: PoolOutcome = { kind: 'verdict', verdict: { allowed: false, message: 'too many' } },
): AdmissionDeps & { jobs: Array<{ job: PoolJob; ms: number }> } {
  const jobs: Array<{ job: PoolJob; ms: number }> = [];
  return {
    jobs,
    target: (policy, generation) =>
      policy === 'p' && generation === 1
        ? { kind: 'loaded', key: 'u/1', spec: spec as never, code }
        : policy === 'q'
          ? { kind: 'loaded', key: 'u/2', spec: spec as never, code: { validations: [] } }
          : policy === 'p'
            ? {
                kind: 'unavailable',
                message: `not loaded ${generation}`,
                failurePolicy: 'Ignore',
                actions: ['Deny'],
              }
            : { kind: 'unknown' },
    evaluate: async (job, ms) => {
      jobs.push({ job, ms });
      return answer;
    },
  };
}

describe('an admission request', () => {
  test('the deadline is timeoutSeconds less 500 ms, and at least 200 ms', () => {
    assert.equal(deadlineMs(10), 9500);
    assert.equal(deadlineMs(1), 500);
    assert.equal(deadlineMs(0.5), 200);
  });

  test('runs the loaded generation with settings as params, its failurePolicy and deadline', async () => {
    const d = deps();
    const result = await review(body(), 'p', 1, d);
    assert.equal(result.status, 200);
    assert.equal(result.verdict, 'denied');
    assert.deepEqual(result.body, {
      apiVersion: 'admission.k8s.io/v1',
      kind: 'AdmissionReview',
      response: {
        uid: 'req-1',
        allowed: false,
        status: { code: 403, message: 'too many', reason: 'Forbidden' },
      },
    });
    assert.equal(d.jobs.length, 1);
    assert.equal(d.jobs[0]!.ms, 1500);
    assert.deepEqual(d.jobs[0]!.job.policy, {
      code,
      params: { max: 3 },
      failurePolicy: 'Fail',
    });
    assert.equal(d.jobs[0]!.job.key, 'u/1');
    // The review goes to the evaluation thread as the text received.
    assert.equal(d.jobs[0]!.job.review, body());
  });

  test('gives the request’s Namespace as namespaceObject, and null for a cluster-scoped request', async () => {
    const d = deps();
    const ns = { metadata: { name: 'team-a', labels: { env: 'prod' } } };
    d.namespace = (name) => (name === 'team-a' ? ns : null);
    await review(body({ namespace: 'team-a' }), 'p', 1, d);
    await review(body(), 'p', 1, d);
    assert.deepEqual(JSON.parse(d.jobs[0]!.job.namespace!), ns);
    assert.equal(d.jobs[1]!.job.namespace, null);
  });

  test('a policy whose code never mentions namespaceObject is sent no Namespace', async () => {
    const d = deps();
    const looked: unknown[] = [];
    d.namespace = (name) => (looked.push(name), { metadata: { name } });
    await review(body({ namespace: 'team-a' }), 'q', 1, d);
    assert.deepEqual(looked, []);
    assert.equal(d.jobs[0]!.job.namespace, null);
  });

  test('answers with the uid the evaluation thread read, or reads it when the thread gave none', async () => {
    const fromThread = await review(
      body(),
      'q',
      1,
      deps({ kind: 'verdict', uid: 'from-thread', verdict: { allowed: true } }),
    );
    assert.deepEqual((fromThread.body as { response: unknown }).response, {
      uid: 'from-thread',
      allowed: true,
    });
    const timedOut = await review(body(), 'q', 1, deps({ kind: 'timeout', ms: 1500 }));
    assert.equal(timedOut.verdict, 'timeout');
    assert.equal((timedOut.body as { response: { uid: string } }).response.uid, 'req-1');
  });

  test('a review the evaluation thread finds invalid is a 400 with its words', async () => {
    const result = await review(
      body(),
      'q',
      1,
      deps({ kind: 'invalid', message: 'expected an admission.k8s.io/v1 AdmissionReview' }),
    );
    assert.deepEqual(result, {
      status: 400,
      body: { error: 'expected an admission.k8s.io/v1 AdmissionReview' },
    });
  });

  test('a generation this replica has not loaded answers by that failurePolicy without evaluating', async () => {
    const d = deps();
    const result = await review(body(), 'p', 7, d);
    assert.equal(d.jobs.length, 0);
    assert.equal(result.verdict, 'error');
    assert.deepEqual((result.body as { response: unknown }).response, {
      uid: 'req-1',
      allowed: true,
      warnings: ['not loaded 7 (failurePolicy Ignore: allowed)'],
    });
  });

  test('on an overloaded replica, a loaded generation is answered by its failurePolicy without evaluating, and one not loaded says so', async () => {
    const d = deps();
    const overloaded = 'policy p: policy server overloaded: 4 requests in flight (limit 4)';
    const result = await review(body(), 'p', 1, d, overloaded);
    assert.equal(d.jobs.length, 0);
    assert.deepEqual([result.status, result.verdict, result.path], [200, 'error', undefined]);
    assert.deepEqual((result.body as { response: unknown }).response, {
      uid: 'req-1',
      allowed: false,
      status: { code: 500, message: overloaded, reason: 'InternalError' },
    });
    const notLoaded = await review(body(), 'p', 7, d, overloaded);
    assert.deepEqual((notLoaded.body as { response: unknown }).response, {
      uid: 'req-1',
      allowed: true,
      warnings: ['not loaded 7 (failurePolicy Ignore: allowed)'],
    });
  });

  test('a policy this server does not have is an HTTP error, so the webhook’s failurePolicy applies', async () => {
    const result = await review(body(), 'other', 1, deps());
    assert.equal(result.status, 404);
  });

  test('a body that is not an AdmissionReview v1 is a 400 that says what was expected', async () => {
    assert.equal((await review('not json', 'p', 1, deps())).status, 400);
    const wrong = await review(
      JSON.stringify({
        apiVersion: 'admission.k8s.io/v1beta1',
        kind: 'AdmissionReview',
        request: { uid: 'x' },
      }),
      'p',
      1,
      deps(),
    );
    assert.equal(wrong.status, 400);
    assert.match(JSON.stringify(wrong.body), /expected an admission.k8s.io\/v1 AdmissionReview/);
    const noUid = await review(
      JSON.stringify({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request: {} }),
      'p',
      1,
      deps(),
    );
    assert.equal(noUid.status, 400);
  });
});

describe('an admission request evaluated inline', () => {
  const pool = new EvaluationPool({ size: 1, max: 2 });
  after(() => pool.close());
  let keys = 0;

  /** Deps serving `code` as policy p generation 1 with `settings`, inline or through the pool. */
  const served = (
    code: unknown,
    settings: { mode: 'protect' | 'monitor'; failurePolicy: 'Fail' | 'Ignore' },
    inline: boolean,
  ): AdmissionDeps & { pooled: number } => {
    const evaluator = new InlineEvaluator();
    // A key per call: threads keep the code they were sent under a key.
    const key = `u${++keys}/1`;
    const d: AdmissionDeps & { pooled: number } = {
      pooled: 0,
      target: () => ({ kind: 'loaded', key, spec: { ...spec, ...settings } as never, code }),
      namespace: (name) => ({ metadata: { name } }),
      evaluate: (job, ms) => {
        d.pooled++;
        return pool.evaluate(job, ms);
      },
      ...(inline && { inline: (job: PoolJob) => evaluator.evaluate(job) }),
    };
    return d;
  };

  test('a bounded policy on a small review is answered without the pool, saying so', async () => {
    const d = served(code, { mode: 'protect', failurePolicy: 'Fail' }, true);
    const result = await review(body({ namespace: 'kube-system' }), 'p', 1, d);
    assert.equal(d.pooled, 0);
    assert.equal(result.path, 'inline');
    assert.equal(result.verdict, 'denied');
  });

  test('a policy that is not bounded is answered by the pool, saying so', async () => {
    const nested = { validations: [{ expression: 'object.a.all(x, object.a.all(y, x == y))' }] };
    const d = served(nested, { mode: 'protect', failurePolicy: 'Fail' }, true);
    const result = await review(body({ object: { a: [1, 1] } }), 'p', 1, d);
    assert.equal(d.pooled, 1);
    assert.equal(result.path, 'pool');
    assert.equal(result.verdict, 'allowed');
  });

  /** [name, expression, mode, failurePolicy]: the same response from both paths. */
  const cases: [string, string, 'protect' | 'monitor', 'Fail' | 'Ignore'][] = [
    ['allowed', "object.metadata.name == 'x'", 'protect', 'Fail'],
    ['denied', "object.metadata.name != 'x'", 'protect', 'Fail'],
    [
      'denied in monitor mode: allowed with a warning',
      "object.metadata.name != 'x'",
      'monitor',
      'Fail',
    ],
    ['an error with failurePolicy Fail: denied', 'object.nope == 1', 'protect', 'Fail'],
    ['an error in monitor mode: allowed with a warning', 'object.nope == 1', 'monitor', 'Fail'],
    [
      'a failing match condition with failurePolicy Ignore',
      'object.nope == 1',
      'protect',
      'Ignore',
    ],
    [
      'the Namespace read through namespaceObject',
      "namespaceObject.metadata.name != 'ns'",
      'protect',
      'Fail',
    ],
  ];
  for (const [name, expression, mode, failurePolicy] of cases) {
    test(`the same response inline and in the pool: ${name}`, async () => {
      const policyCode = { validations: [{ expression, message: 'no' }] };
      const request = body({ namespace: 'ns' });
      const inline = await review(
        request,
        'p',
        1,
        served(policyCode, { mode, failurePolicy }, true),
      );
      const pooled = await review(
        request,
        'p',
        1,
        served(policyCode, { mode, failurePolicy }, false),
      );
      assert.equal(inline.path, 'inline');
      assert.equal(pooled.path, 'pool');
      assert.deepEqual({ ...inline, path: 'pool' }, pooled);
    });
  }
});
