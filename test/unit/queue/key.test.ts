import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  formatKey,
  functionOf,
  InvalidKeyError,
  newJobId,
  parseKey,
} from '../../../control-plane/queue/key.ts';

const valid: [string, ReturnType<typeof parseKey>][] = [
  ['policy/require-labels', { function: 'policy', name: 'require-labels' }],
  ['policyserver/default', { function: 'policyserver', name: 'default' }],
  [
    'pod/rollcall-system/server-7d9f-abcde',
    { function: 'pod', namespace: 'rollcall-system', name: 'server-7d9f-abcde' },
  ],
  ['policy/my.policy.example', { function: 'policy', name: 'my.policy.example' }],
];

for (const [key, parsed] of valid) {
  test(`parses ${key}`, () => {
    assert.deepEqual(parseKey(key), parsed);
    assert.equal(formatKey(parsed), key);
    assert.equal(functionOf(key), parsed.function);
  });
}

const invalid: [string, string][] = [
  ['a key without a name', 'policy'],
  ['an empty name', 'policy/'],
  ['too many segments', 'a/b/c/d'],
  ['a colon (BullMQ ids cannot hold one)', 'policy/a:b'],
  ['an uppercase function', 'Policy/a'],
  ['whitespace', 'policy/a b'],
  ['a leading dash', 'policy/-a'],
];

for (const [what, key] of invalid) {
  test(`rejects ${what}`, () => {
    assert.throws(() => parseKey(key), InvalidKeyError);
  });
}

test('job ids are unique per add, free of colons and slashes', () => {
  const id = newJobId('pod/ns/name', 'u1');
  assert.equal(id, 'pod_ns_name_u1');
  assert.ok(!id.includes(':') && !id.includes('/'));
});
