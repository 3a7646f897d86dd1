import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { backoffDelay, defaultBackoff, spread } from '../../../lib/backoff.ts';
import { defaultWatchBackoff } from '../../../lib/kube/reflector.ts';

describe('backoffDelay', () => {
  const noJitter = { baseMs: 10, capMs: 1000, factor: 2, jitter: 0 };

  test('doubles from the base with every failure', () => {
    assert.deepEqual(
      [1, 2, 3, 4, 5].map((n) => backoffDelay(n, noJitter)),
      [10, 20, 40, 80, 160],
    );
  });

  test('never exceeds the cap, even after very many failures', () => {
    assert.equal(backoffDelay(8, noJitter), 1000);
    assert.equal(backoffDelay(10_000, noJitter), 1000);
  });

  test('jitter takes up to its fraction off, never adds', () => {
    const opts = { ...noJitter, baseMs: 100, jitter: 0.2 };
    assert.equal(
      backoffDelay(1, opts, () => 0),
      100,
    );
    assert.equal(
      backoffDelay(1, opts, () => 1),
      80,
    );
    assert.equal(
      backoffDelay(1, opts, () => 0.5),
      90,
    );
  });

  test('honours a custom growth factor', () => {
    assert.deepEqual(
      [1, 2, 3, 4].map((n) =>
        backoffDelay(n, { baseMs: 10, factor: 3, capMs: 100, jitter: 0 }, () => 0),
      ),
      [10, 30, 90, 100],
    );
  });

  test("the queue's defaults go from 100 ms to a cap of minutes", () => {
    assert.equal(
      backoffDelay(1, defaultBackoff, () => 0),
      100,
    );
    assert.equal(
      backoffDelay(30, defaultBackoff, () => 0),
      5 * 60_000,
    );
  });

  test("the reflector's defaults start at 200 ms, double per failure and stop at 30 s", () => {
    const noJitter = () => 0;
    assert.deepEqual(
      [1, 2, 3, 4].map((n) => backoffDelay(n, defaultWatchBackoff, noJitter)),
      [200, 400, 800, 1600],
    );
    assert.equal(backoffDelay(21, defaultWatchBackoff, noJitter), 30_000);
    assert.equal(backoffDelay(1_001, defaultWatchBackoff, noJitter), 30_000);
  });

  test("the reflector's defaults jitter downwards by at most half", () => {
    assert.equal(
      backoffDelay(4, defaultWatchBackoff, () => 0.999_999),
      800,
    );
    assert.equal(
      backoffDelay(4, { ...defaultWatchBackoff, jitter: 0.1 }, () => 0.5),
      1520,
    );
    for (let i = 0; i < 100; i++) {
      const delay = backoffDelay(3, defaultWatchBackoff);
      assert.ok(delay >= 400 && delay <= 800, `${delay}`);
    }
  });
});

describe('spread', () => {
  test('returns a value in [base, 2·base)', () => {
    assert.equal(
      spread(300, () => 0),
      300,
    );
    assert.equal(
      spread(300, () => 0.5),
      450,
    );
    assert.ok(spread(300) < 600);
  });
});
