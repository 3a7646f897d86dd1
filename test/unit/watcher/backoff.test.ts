import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { backoffDelay, spread } from '../../../watcher/backoff.ts';

describe('backoffDelay', () => {
  const noJitter = () => 0;

  it('starts at 200 ms and doubles per consecutive failure', () => {
    assert.deepEqual(
      [0, 1, 2, 3].map((n) => backoffDelay(n, {}, noJitter)),
      [200, 400, 800, 1600],
    );
  });

  it('never exceeds the 30 s cap', () => {
    assert.equal(backoffDelay(20, {}, noJitter), 30_000);
    assert.equal(backoffDelay(1_000, {}, noJitter), 30_000);
  });

  it('jitters downwards by at most the jitter fraction', () => {
    assert.equal(
      backoffDelay(3, {}, () => 0.999_999),
      800,
    );
    assert.equal(
      backoffDelay(3, { jitter: 0.1 }, () => 0.5),
      1520,
    );
    for (let i = 0; i < 100; i++) {
      const delay = backoffDelay(2, {});
      assert.ok(delay >= 400 && delay <= 800, `${delay}`);
    }
  });

  it('honours custom initial, factor and cap', () => {
    assert.deepEqual(
      [0, 1, 2, 3].map((n) => backoffDelay(n, { initialMs: 10, factor: 3, maxMs: 100 }, noJitter)),
      [10, 30, 90, 100],
    );
  });
});

describe('spread', () => {
  it('returns a value in [base, 2·base)', () => {
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
