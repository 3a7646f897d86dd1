import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  ConfigError,
  formatDuration,
  parseConfig,
  parseDuration,
} from '../../../control-plane/config.ts';

const base = ['--redis-url', 'redis://localhost:6379'];

describe('parseDuration reads Go-style durations', () => {
  const rows: [string, number | undefined][] = [
    ['8760h', 8760 * 3_600_000],
    ['30s', 30_000],
    ['1h30m', 5_400_000],
    ['1.5h', 5_400_000],
    ['500ms', 500],
    ['2m10s', 130_000],
    ['', undefined],
    ['30', undefined],
    ['1d', undefined],
    ['-5s', undefined],
    ['5 s', undefined],
  ];
  for (const [text, ms] of rows)
    test(`${JSON.stringify(text)} is ${ms === undefined ? 'not a duration' : `${ms} ms`}`, () =>
      assert.equal(parseDuration(text), ms));
});

describe('formatDuration writes what parseDuration reads, in the largest whole unit', () => {
  const rows: [number, string][] = [
    [43_800 * 3_600_000, '43800h'],
    [180_000, '3m'],
    [90_000, '90s'],
    [5_400_000, '90m'],
    [1500, '1500ms'],
  ];
  for (const [ms, text] of rows)
    test(`${ms} ms is ${text}`, () => {
      assert.equal(formatDuration(ms), text);
      assert.equal(parseDuration(text), ms);
    });
});

describe('certificate and policy-server image settings', () => {
  test("default to rollcall's image, a 5-year CA and 1-year serving certificates", () => {
    const config = parseConfig(base, {});
    assert.equal(config.policyServerImage, 'rollcall:0.1.0');
    assert.equal(config.caValidityMs, 43_800 * 3_600_000);
    assert.equal(config.servingCertValidityMs, 8760 * 3_600_000);
  });

  test('come from flags, then the environment', () => {
    const env = {
      ROLLCALL_POLICY_SERVER_IMAGE: 'env/rollcall:1',
      ROLLCALL_CA_VALIDITY: '2h',
      ROLLCALL_SERVING_CERT_VALIDITY: '30s',
    };
    const fromEnv = parseConfig(base, env);
    assert.deepEqual(
      [fromEnv.policyServerImage, fromEnv.caValidityMs, fromEnv.servingCertValidityMs],
      ['env/rollcall:1', 7_200_000, 30_000],
    );
    const fromFlags = parseConfig(
      [
        ...base,
        '--policy-server-image=flag/rollcall:2',
        '--ca-validity=10m',
        '--serving-cert-validity=90s',
      ],
      env,
    );
    assert.deepEqual(
      [fromFlags.policyServerImage, fromFlags.caValidityMs, fromFlags.servingCertValidityMs],
      ['flag/rollcall:2', 600_000, 90_000],
    );
  });

  test('refuse a validity that is not a duration, or too short to be served, saying which flag', () => {
    assert.throws(
      () => parseConfig([...base, '--serving-cert-validity=1y'], {}),
      (err: Error) =>
        err instanceof ConfigError && /--serving-cert-validity .* got "1y"/.test(err.message),
    );
    assert.throws(() => parseConfig([...base, '--serving-cert-validity=1s'], {}), /at least 3 s/);
    assert.throws(() => parseConfig(base, { ROLLCALL_CA_VALIDITY: '5' }), /ROLLCALL_CA_VALIDITY/);
  });
});
