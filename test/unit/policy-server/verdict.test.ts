import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { admissionResponse, type PolicyAnswerContext } from '../../../data-plane/verdict.ts';

const protect: PolicyAnswerContext = {
  policy: 'p',
  generation: 2,
  mode: 'protect',
  failurePolicy: 'Fail',
};
const monitor: PolicyAnswerContext = { ...protect, mode: 'monitor' };
const ignore: PolicyAnswerContext = { ...protect, failurePolicy: 'Ignore' };

describe('verdict mapping', () => {
  test('protect: an allowed verdict is allowed', () => {
    assert.deepEqual(
      admissionResponse('u1', protect, { kind: 'verdict', verdict: { allowed: true } }),
      {
        response: { uid: 'u1', allowed: true },
        verdict: 'allowed',
      },
    );
  });

  test('protect: a denial carries the validation’s message, reason and code', () => {
    const r = admissionResponse('u1', protect, {
      kind: 'verdict',
      verdict: { allowed: false, message: 'no latest tag', reason: 'Invalid', code: 422 },
    });
    assert.deepEqual(r, {
      response: {
        uid: 'u1',
        allowed: false,
        status: { code: 422, message: 'no latest tag', reason: 'Invalid' },
      },
      verdict: 'denied',
    });
  });

  test('protect: a denial without reason is Forbidden (403)', () => {
    const r = admissionResponse('u1', protect, {
      kind: 'verdict',
      verdict: { allowed: false, message: 'm' },
    });
    assert.deepEqual(r.response.status, { code: 403, message: 'm', reason: 'Forbidden' });
  });

  test('monitor: a denial is allowed with a warning naming what it would have denied', () => {
    const r = admissionResponse('u1', monitor, {
      kind: 'verdict',
      verdict: { allowed: false, message: 'no latest tag' },
    });
    assert.deepEqual(r, {
      response: { uid: 'u1', allowed: true, warnings: ['p (monitor) would deny: no latest tag'] },
      verdict: 'allowed',
    });
  });

  test('a timeout with failurePolicy Fail is denied, saying which generation did not finish in time', () => {
    const r = admissionResponse('u1', protect, { kind: 'timeout', ms: 9500 });
    assert.equal(r.verdict, 'timeout');
    assert.equal(r.response.allowed, false);
    assert.equal(
      r.response.status?.message,
      'policy p generation 2 timed out: did not finish within 9500 ms',
    );
  });

  test('a timeout with failurePolicy Ignore is allowed with a warning', () => {
    const r = admissionResponse('u1', ignore, { kind: 'timeout', ms: 700 });
    assert.equal(r.verdict, 'timeout');
    assert.equal(r.response.allowed, true);
    assert.deepEqual(r.response.warnings, [
      'policy p generation 2 timed out: did not finish within 700 ms (failurePolicy Ignore: allowed)',
    ]);
  });

  test('a run past the cost budget with failurePolicy Fail is denied (500 InternalError), saying so, and counted apart', () => {
    const r = admissionResponse('u1', protect, {
      kind: 'cost',
      budget: 10_000_000,
      used: 10_000_007,
    });
    assert.deepEqual(r, {
      response: {
        uid: 'u1',
        allowed: false,
        status: {
          code: 500,
          message: 'policy p generation 2 exceeded its runtime cost budget 10^7',
          reason: 'InternalError',
        },
      },
      verdict: 'cost',
    });
  });

  test('a run past the cost budget with failurePolicy Ignore, or in monitor mode, is allowed with a warning', () => {
    const ignored = admissionResponse('u1', ignore, { kind: 'cost', budget: 10_000_000 });
    assert.equal(ignored.verdict, 'cost');
    assert.deepEqual(ignored.response, {
      uid: 'u1',
      allowed: true,
      warnings: [
        'policy p generation 2 exceeded its runtime cost budget 10^7 (failurePolicy Ignore: allowed)',
      ],
    });
    const monitored = admissionResponse('u1', monitor, { kind: 'cost', budget: 2 ** 20 });
    assert.deepEqual(monitored.response.warnings, [
      'policy p generation 2 exceeded its runtime cost budget 2^20 (failurePolicy Fail, monitor mode: allowed)',
    ]);
  });

  test('a runtime error follows the failurePolicy', () => {
    const fail = admissionResponse('u1', protect, { kind: 'error', message: 'no such key: spec' });
    assert.equal(fail.verdict, 'error');
    assert.equal(fail.response.status?.message, 'policy p generation 2 failed: no such key: spec');
    assert.equal(
      admissionResponse('u1', ignore, { kind: 'error', message: 'x' }).response.allowed,
      true,
    );
  });

  test('monitor never denies, not even on a timeout with failurePolicy Fail', () => {
    const r = admissionResponse('u1', monitor, { kind: 'timeout', ms: 100 });
    assert.equal(r.response.allowed, true);
    assert.equal(r.verdict, 'timeout');
  });

  test('a generation this replica has not loaded answers by the failurePolicy with the reason', () => {
    const message = 'policy p: this replica has not loaded generation 2 (it is still loading)';
    const r = admissionResponse('u1', protect, { kind: 'unavailable', message });
    assert.deepEqual(r.response, {
      uid: 'u1',
      allowed: false,
      status: { code: 500, message, reason: 'InternalError' },
    });
  });
});
