import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ConfigError, parseConfig } from '../../../control-plane/config.ts';

const base = ['--redis-url', 'redis://localhost:6379'];

describe('the API write cap', () => {
  test('is off by default: API Priority and Fairness decides', () => {
    const config = parseConfig(base, {});
    assert.equal(config.writeRate, undefined);
    assert.equal(config.writeBurst, undefined);
  });

  test('is set by --write-rate, with --write-burst or without (the limiter doubles the rate)', () => {
    assert.equal(parseConfig([...base, '--write-rate', '50'], {}).writeRate, 50);
    assert.equal(parseConfig([...base, '--write-rate', '50'], {}).writeBurst, undefined);
    const both = parseConfig(base, { ROLLCALL_WRITE_RATE: '20', ROLLCALL_WRITE_BURST: '5' });
    assert.deepEqual([both.writeRate, both.writeBurst], [20, 5]);
  });

  test('a burst without a rate is refused with what to do', () => {
    assert.throws(
      () => parseConfig([...base, '--write-burst', '10'], {}),
      (err: unknown) => err instanceof ConfigError && /set --write-rate too/.test(err.message),
    );
  });

  test('a rate that is not a whole number ≥ 1 is refused', () => {
    assert.throws(() => parseConfig([...base, '--write-rate', '0'], {}), ConfigError);
    assert.throws(() => parseConfig(base, { ROLLCALL_WRITE_RATE: 'fast' }), ConfigError);
  });
});
