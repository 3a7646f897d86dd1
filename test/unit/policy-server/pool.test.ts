import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { EvaluationPool, type PoolJob } from '../../../data-plane/pool.ts';

const engine = new URL('./fixtures/fake-engine.ts', import.meta.url).href;
const review = JSON.stringify({
  apiVersion: 'admission.k8s.io/v1',
  kind: 'AdmissionReview',
  request: { uid: 'r1' },
});
const job = (key: string, expression: string, message?: string): PoolJob => ({
  key,
  policy: {
    code: { validations: [{ expression, ...(message ? { message } : {}) }] },
    params: {},
    failurePolicy: 'Fail',
  },
  review,
  namespace: null,
});

describe('the evaluation pool', () => {
  const pool = new EvaluationPool({ size: 2, max: 6, engine });
  after(() => pool.close());

  test('answers the engine’s verdict: allowed, or denied with the message', async () => {
    assert.deepEqual(await pool.evaluate(job('u/1', 'true'), 5000), {
      kind: 'verdict',
      uid: 'r1',
      verdict: { allowed: true },
    });
    assert.deepEqual(await pool.evaluate(job('u/2', 'false', 'no latest tag'), 5000), {
      kind: 'verdict',
      uid: 'r1',
      verdict: { allowed: false, message: 'no latest tag' },
    });
  });

  test('turns a runtime error into an error outcome and keeps the thread', async () => {
    const before = pool.stats().threads;
    assert.deepEqual(await pool.evaluate(job('u/3', 'throw'), 5000), {
      kind: 'error',
      uid: 'r1',
      message: 'no such key: spec',
    });
    assert.equal(pool.stats().threads >= before, true);
  });

  test('cuts a stuck evaluation off at its deadline while other policies answer fast', async () => {
    const started = Date.now();
    const stuck = pool.evaluate(job('stuck/1', 'spin'), 1000);
    const fast: number[] = [];
    for (let i = 0; i < 5; i++) {
      const t = Date.now();
      const outcome = await pool.evaluate(job('fast/1', 'true'), 5000);
      assert.equal(outcome.kind, 'verdict');
      fast.push(Date.now() - t);
    }
    const outcome = await stuck;
    const took = Date.now() - started;
    assert.deepEqual(outcome, { kind: 'timeout', ms: 1000 });
    assert.ok(took >= 990 && took < 3000, `the stuck request answered after ${took} ms`);
    // The fast ones did not wait for the stuck one (a warm spare took them). Bounds are wide
    // because CI runs this beside a cluster on two cores.
    assert.ok(Math.max(...fast) < 800, `fast answers took ${fast.join(', ')} ms`);
    // The terminated thread was replaced: the pool still answers.
    assert.equal((await pool.evaluate(job('fast/1', 'true'), 5000)).kind, 'verdict');
  });

  test('answers within the deadline even when every thread is stuck', async () => {
    const small = new EvaluationPool({ size: 1, max: 1, engine });
    try {
      const stuck = small.evaluate(job('s/1', 'spin'), 3000);
      const t = Date.now();
      const queued = await small.evaluate(job('q/1', 'true'), 200);
      assert.deepEqual(queued, { kind: 'timeout', ms: 200 });
      // At its own deadline, not when the stuck one's thread is freed at 3 s.
      const waited = Date.now() - t;
      assert.ok(waited < 1500, `the queued request answered after ${waited} ms`);
      assert.equal((await stuck).kind, 'timeout');
      assert.equal((await small.evaluate(job('q/1', 'true'), 5000)).kind, 'verdict');
    } finally {
      await small.close();
    }
  });

  test('a flood of requests to one stuck policy leaves threads for the others', async () => {
    const flooded = new EvaluationPool({ size: 4, max: 4, perKeyMax: 2, engine });
    try {
      while (!flooded.warm()) await new Promise((r) => setTimeout(r, 10));
      const stuck = Array.from({ length: 6 }, () => flooded.evaluate(job('flood/1', 'spin'), 2500));
      const t = Date.now();
      const fast = await flooded.evaluate(job('other/1', 'true'), 5000);
      const took = Date.now() - t;
      assert.equal(fast.kind, 'verdict');
      assert.ok(took < 1500, `the other policy waited ${took} ms`);
      assert.ok(flooded.stats().threads <= 4);
      // Cut off at their deadline, or (those still queued when the first were cut off) not
      // started at all: by then the pool knew the policy's evaluations outlast its deadline.
      for (const outcome of await Promise.all(stuck)) {
        if (outcome.kind === 'error') assert.match(outcome.message, /so it was not started/);
        else assert.equal(outcome.kind, 'timeout');
      }
    } finally {
      await flooded.close();
    }
  });

  test('a request its policy’s queue would keep past its deadline is answered at once', async () => {
    const lost: string[] = [];
    const one = new EvaluationPool({
      size: 2,
      max: 2,
      perKeyMax: 1,
      engine,
      onWorkerLost: (reason) => lost.push(reason),
    });
    try {
      while (!one.warm()) await new Promise((r) => setTimeout(r, 10));
      // The pool learns that this policy's evaluations take its whole deadline.
      assert.equal((await one.evaluate(job('slow/1', 'spin'), 600)).kind, 'timeout');
      assert.deepEqual(lost, ['timeout']);
      const running = one.evaluate(job('slow/1', 'spin'), 600);
      const t = Date.now();
      const behind = await one.evaluate(job('slow/1', 'spin'), 600);
      assert.ok(Date.now() - t < 100, `answered after ${Date.now() - t} ms`);
      assert.equal(behind.kind, 'error');
      assert.match(
        behind.kind === 'error' ? behind.message : '',
        /evaluations take ~\d+ ms and 1 of its requests are ahead of this one on 1 thread\(s\): it could not finish within its deadline/,
      );
      assert.equal((await running).kind, 'timeout');
      // Other policies are not judged by that one's times.
      assert.equal((await one.evaluate(job('fast/2', 'true'), 600)).kind, 'verdict');
    } finally {
      await one.close();
    }
  });

  test('stays warm while a thread cut off at a deadline is replaced', async () => {
    const small = new EvaluationPool({ size: 1, max: 1, engine });
    try {
      while (!small.warm()) await new Promise((r) => setTimeout(r, 10));
      const stuck = small.evaluate(job('w/1', 'spin'), 300);
      const seen: boolean[] = [];
      const sampler = setInterval(() => seen.push(small.warm()), 5);
      assert.equal((await stuck).kind, 'timeout');
      // The replacement thread loads its engine meanwhile.
      await new Promise((r) => setTimeout(r, 300));
      clearInterval(sampler);
      assert.ok(!seen.includes(false), 'readiness followed a thread replaced at a deadline');
    } finally {
      await small.close();
    }
  });

  test('a policy that allocates without bound kills its thread, not the process', async () => {
    const small = new EvaluationPool({ size: 1, max: 2, maxHeapMb: 32, engine });
    try {
      const outcome = await small.evaluate(job('hog/1', 'hog'), 20_000);
      assert.equal(outcome.kind, 'error');
      assert.match(outcome.kind === 'error' ? outcome.message : '', /evaluation thread died/);
      assert.equal((await small.evaluate(job('ok/1', 'true'), 5000)).kind, 'verdict');
    } finally {
      await small.close();
    }
  });

  test('a thread sent more policy generations than it keeps forgets them and is sent them again', async () => {
    const one = new EvaluationPool({ size: 1, max: 1, engine });
    try {
      for (let i = 0; i < 300; i++)
        assert.equal((await one.evaluate(job(`many/${i}`, 'true'), 5000)).kind, 'verdict');
      // Another policy under the same key shows that it was sent again (a real key's is fixed).
      assert.deepEqual(await one.evaluate(job('many/0', 'false', 'first again'), 5000), {
        kind: 'verdict',
        uid: 'r1',
        verdict: { allowed: false, message: 'first again' },
      });
    } finally {
      await one.close();
    }
  });

  test('answers a request whose compile fails with an error', async () => {
    const outcome = await pool.evaluate(job('bad/1', 'bad'), 5000);
    assert.equal(outcome.kind, 'error');
  });
});
