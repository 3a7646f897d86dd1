import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ApiException } from '@kubernetes/client-node';
import {
  httpOutcome,
  maxRetryAfterMs,
  outcomeOfError,
  parseRetryAfter,
} from '../../../control-plane/queue/kube-errors.ts';
import {
  done,
  nextStep,
  requeueAfter,
  retry,
  terminal,
  TerminalError,
  type Outcome,
} from '../../../control-plane/queue/outcome.ts';

const backoff = (n: number) => n * 100;

const steps: [string, Outcome, number, ReturnType<typeof nextStep>][] = [
  ['done forgets failures', done(), 3, { type: 'finish', failures: 0 }],
  [
    'requeueAfter runs later and forgets failures',
    requeueAfter(500),
    3,
    { type: 'rerun', delayMs: 500, failures: 0 },
  ],
  [
    'retry counts a failure and backs off',
    retry(new Error('x')),
    3,
    { type: 'rerun', delayMs: 400, failures: 4 },
  ],
  ['terminal fails and forgets', terminal('bad'), 3, { type: 'fail', reason: 'bad', failures: 0 }],
  [
    'throttled waits Retry-After, failures unchanged',
    { kind: 'throttled', delayMs: 2000 },
    3,
    { type: 'rerun', delayMs: 2000, failures: 3 },
  ],
  [
    'conflict re-runs at once, failures unchanged',
    { kind: 'conflict' },
    3,
    { type: 'rerun', delayMs: 0, failures: 3 },
  ],
];

for (const [name, outcome, failures, expected] of steps) {
  test(name, () => assert.deepEqual(nextStep(outcome, failures, backoff), expected));
}

test('Retry-After in seconds', () => assert.equal(parseRetryAfter('3'), 3000));
test('Retry-After as an HTTP date', () => {
  const now = Date.parse('Wed, 21 Oct 2015 07:28:00 GMT');
  assert.equal(parseRetryAfter('Wed, 21 Oct 2015 07:28:05 GMT', now), 5000);
  assert.equal(parseRetryAfter('Wed, 21 Oct 2015 07:27:00 GMT', now), 0, 'a past date means now');
});
test('Retry-After that is garbage or missing is unusable', () => {
  assert.equal(parseRetryAfter('soon'), undefined);
  assert.equal(parseRetryAfter(undefined), undefined);
});
test('Retry-After is capped', () => assert.equal(parseRetryAfter('86400'), maxRetryAfterMs));

test('client-node 429 becomes throttled with Retry-After, whatever the header case', () => {
  assert.deepEqual(
    httpOutcome(new ApiException(429, 'Too Many Requests', {}, { 'Retry-After': '2' })),
    { kind: 'throttled', delayMs: 2000 },
  );
  assert.deepEqual(
    httpOutcome(new ApiException(429, 'Too Many Requests', {}, { 'retry-after': '7' })),
    { kind: 'throttled', delayMs: 7000 },
  );
});
test('429 without Retry-After waits a second', () => {
  assert.deepEqual(httpOutcome(new ApiException(429, 'Too Many Requests', {}, {})), {
    kind: 'throttled',
    delayMs: 1000,
  });
});
test('client-node 409 becomes conflict', () => {
  assert.deepEqual(httpOutcome(new ApiException(409, 'Conflict', {}, {})), { kind: 'conflict' });
});
test('other HTTP errors and plain errors are retryable', () => {
  assert.equal(outcomeOfError(new ApiException(500, 'boom', {}, {})).kind, 'retry');
  assert.equal(outcomeOfError(new Error('boom')).kind, 'retry');
  const fromString = outcomeOfError('a string');
  assert.ok(fromString.kind === 'retry' && fromString.error.message === 'a string');
});
test('TerminalError is terminal with its message', () => {
  assert.deepEqual(outcomeOfError(new TerminalError('invalid spec')), {
    kind: 'terminal',
    reason: 'invalid spec',
  });
});
test('Node system errors with a string code are not HTTP errors', () => {
  const err = Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
  assert.equal(outcomeOfError(err).kind, 'retry');
});
