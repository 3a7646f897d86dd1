import assert from 'node:assert/strict';
import { test } from 'node:test';
import { backoffDelay, defaultBackoff } from '../../../queue/backoff.ts';

const noJitter = { baseMs: 10, capMs: 1000, jitter: 0 };

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
  const opts = { baseMs: 100, capMs: 1000, jitter: 0.2 };
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

test('defaults go from 100 ms to a cap of minutes', () => {
  assert.equal(
    backoffDelay(1, defaultBackoff, () => 0),
    100,
  );
  assert.equal(
    backoffDelay(30, defaultBackoff, () => 0),
    5 * 60_000,
  );
});
