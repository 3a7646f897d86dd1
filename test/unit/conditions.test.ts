import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { Condition } from '../../api/v1alpha1.ts';
import {
  isValidReason,
  MESSAGE_MAX_BYTES,
  readinessOf,
  setCondition,
  setReadiness,
  toValidReason,
  truncateUtf8,
  type Readiness,
} from '../../lib/kstatus/conditions.ts';

const t0 = new Date('2024-01-01T00:00:00Z');
const t1 = new Date('2024-01-01T00:05:00Z');
const bytes = (s: string) => Buffer.byteLength(s, 'utf8');

describe('setCondition', () => {
  const ready: Condition[] = setCondition(
    [],
    { type: 'Ready', status: 'True', reason: 'Loaded', message: 'all loaded' },
    3,
    t0,
  );

  test('a new condition gets the current time and the observed generation', () => {
    assert.deepEqual(ready, [
      {
        type: 'Ready',
        status: 'True',
        reason: 'Loaded',
        message: 'all loaded',
        lastTransitionTime: t0.toISOString(),
        observedGeneration: 3,
      },
    ]);
  });

  const changes: { name: string; change: Partial<Condition>; moves: boolean }[] = [
    {
      name: 'setting the same status, reason and message keeps lastTransitionTime',
      change: {},
      moves: false,
    },
    { name: 'a status change moves lastTransitionTime', change: { status: 'False' }, moves: true },
    { name: 'a reason change moves lastTransitionTime', change: { reason: 'Other' }, moves: true },
    {
      name: 'a message change moves lastTransitionTime',
      change: { message: '2/3 loaded' },
      moves: true,
    },
  ];
  for (const { name, change, moves } of changes) {
    test(name, () => {
      const [first] = ready;
      assert.ok(first);
      const input = {
        type: 'Ready',
        status: first.status,
        reason: first.reason,
        message: first.message,
        ...change,
      };
      const [next] = setCondition(ready, input, 4, t1);
      assert.equal(next?.lastTransitionTime, (moves ? t1 : t0).toISOString());
      assert.equal(next?.observedGeneration, 4, 'observedGeneration is always stamped');
    });
  }

  test('other conditions are left alone and the input list is not mutated', () => {
    const other: Condition = {
      type: 'Custom',
      status: 'True',
      reason: 'X',
      message: '',
      lastTransitionTime: 'then',
    };
    const before = structuredClone([other, ...ready]);
    const after = setCondition(
      before,
      { type: 'Ready', status: 'False', reason: 'Loading', message: 'm' },
      4,
      t1,
    );
    assert.deepEqual(before, [other, ...ready]);
    assert.deepEqual(after[0], other);
    assert.equal(after[1]?.status, 'False');
  });

  test('an invalid reason is a programming error and throws', () => {
    assert.throws(
      () =>
        setCondition(
          [],
          { type: 'Ready', status: 'True', reason: 'not valid', message: '' },
          1,
          t0,
        ),
      /does not match/,
    );
  });

  test('an over-long message is truncated to the metav1 limit', () => {
    const [c] = setCondition(
      [],
      { type: 'Ready', status: 'True', reason: 'R', message: 'é'.repeat(40000) },
      1,
      t0,
    );
    assert.ok(c && bytes(c.message) <= MESSAGE_MAX_BYTES);
    assert.ok(c.message.endsWith('…'));
  });
});

describe('condition reasons', () => {
  const table: { reason: string; valid: boolean }[] = [
    { reason: 'Loaded', valid: true },
    { reason: 'A', valid: true },
    { reason: 'Load_Failed:v2,x1', valid: true },
    { reason: '', valid: false },
    { reason: '1Loaded', valid: false },
    { reason: 'Load Failed', valid: false },
    { reason: 'Loaded:', valid: false },
    { reason: 'Loaded,', valid: false },
    { reason: 'Load-Failed', valid: false },
    { reason: 'A'.repeat(1024), valid: true },
    { reason: 'A'.repeat(1025), valid: false },
  ];
  for (const { reason, valid } of table) {
    test(`"${reason.length > 20 ? `${reason.slice(0, 5)}… (${reason.length})` : reason}" is ${valid ? 'valid' : 'invalid'}`, () => {
      assert.equal(isValidReason(reason), valid);
    });
  }

  test('toValidReason repairs foreign reasons and falls back when it cannot', () => {
    assert.equal(toValidReason('Some reason', 'Fallback'), 'Some_reason');
    assert.equal(toValidReason('ProgressDeadlineExceeded', 'Fallback'), 'ProgressDeadlineExceeded');
    assert.equal(toValidReason('', 'Fallback'), 'Fallback');
    assert.equal(toValidReason('123', 'Fallback'), 'Fallback');
    assert.equal(toValidReason('Bad:', 'Fallback'), 'Bad');
  });
});

describe('truncateUtf8', () => {
  // [name, input, max bytes, expected]
  const table: [string, string, number, string][] = [
    ['a short message is unchanged', 'hello', 10, 'hello'],
    ['a message exactly at the limit is unchanged', 'héllo', 6, 'héllo'],
    ['ASCII is cut and marked', 'hello world', 8, 'hello…'],
    ['a two-byte character is never split', 'ééééé', 8, 'éé…'],
    ['an emoji (four bytes, a surrogate pair) is never split', 'ab😀😀', 8, 'ab…'],
    ['a whole emoji that fits is kept', 'ab😀😀', 9, 'ab😀…'],
    ['a limit smaller than the marker yields just the marker', 'abcdef', 2, '…'],
  ];
  for (const [name, input, max, expected] of table) {
    test(name, () => {
      const out = truncateUtf8(input, max);
      assert.equal(out, expected);
      assert.ok(out === '…' || bytes(out) <= max);
      assert.ok(!out.includes('\uFFFD'), 'no replacement characters');
    });
  }
});

describe('setReadiness keeps Ready, Reconciling and Stalled consistent', () => {
  const states: Readiness[] = [
    { state: 'Ready', reason: 'Loaded', message: '3/3' },
    { state: 'Reconciling', reason: 'Loading', message: '1/3' },
    { state: 'Stalled', reason: 'LoadFailed', message: 'pod p: boom' },
  ];
  // Every transition, from every state, must leave a consistent set.
  for (const from of states) {
    for (const to of states) {
      test(`${from.state} → ${to.state}`, () => {
        const before = setReadiness([], from, 1, t0);
        const after = setReadiness(before, to, 2, t1);
        const types = after.map((c) => c.type);
        const readyCondition = after.find((c) => c.type === 'Ready');
        assert.equal(readyCondition?.status, to.state === 'Ready' ? 'True' : 'False');
        assert.equal(readyCondition?.reason, to.reason);
        assert.equal(types[0], 'Ready', 'Ready comes first');
        assert.ok(!(types.includes('Reconciling') && types.includes('Stalled')), 'never both');
        assert.deepEqual(
          types,
          to.state === 'Ready' ? ['Ready'] : ['Ready', to.state],
          'abnormal conditions are present only when True',
        );
        for (const c of after) {
          assert.equal(c.observedGeneration, 2);
          if (c.type !== 'Ready') assert.equal(c.status, 'True');
        }
        assert.equal(readinessOf(after), to.state);
        const unchanged = from.state === to.state;
        assert.equal(readyCondition?.lastTransitionTime, (unchanged ? t0 : t1).toISOString());
      });
    }
  }
});
