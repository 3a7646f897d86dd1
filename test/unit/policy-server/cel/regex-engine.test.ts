// The policy server runs V8 with --enable-experimental-regexp-engine-on-excessive-backtracks:
// a catastrophic pattern then falls back to a linear-time engine instead of stalling the
// process (~20 s for this input in the backtracking engine). This file sets the flag itself,
// as the policy server's entry point does, before any RegExp is compiled.
import v8 from 'node:v8';
v8.setFlagsFromString('--enable-experimental-regexp-engine-on-excessive-backtracks');

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { holds } from './helpers.ts';

test('a catastrophic pattern on a long non-matching input finishes fast through evaluatePolicy', () => {
  const object = { name: `${'a'.repeat(30)}!` };
  const started = performance.now();
  assert.equal(holds("!object.name.matches('^(a+)+$')", object), true);
  assert.equal(holds("object.name.find('^(a+)+$') == ''", object), true);
  const elapsed = performance.now() - started;
  assert.ok(elapsed < 1000, `took ${elapsed.toFixed(0)} ms`);
});
