import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { PolicyServerMetrics } from '../../../policy-server/metrics.ts';

describe('policy-server metrics', () => {
  test('count answers by policy, generation and verdict, and load failures by policy', async () => {
    const m = new PolicyServerMetrics();
    m.admission('p', 3, 'timeout', 0.4);
    m.loaded('q', 'url', 'Failed', 1.2);
    const text = await m.registry.metrics();
    assert.match(
      text,
      /rollcall_admission_requests_total\{policy="p",generation="3",verdict="timeout"\} 1/,
    );
    assert.match(text, /rollcall_policy_load_failures_total\{policy="q"\} 1/);
    assert.match(
      text,
      /rollcall_policy_load_duration_seconds_count\{source="url",state="Failed"\} 1/,
    );
  });

  test('time answers by policy and by the path that evaluated them', async () => {
    const m = new PolicyServerMetrics();
    m.admission('p', 1, 'allowed', 0.001, 'inline');
    m.admission('p', 1, 'timeout', 1.5, 'pool');
    m.admission('p', 2, 'error', 0.001);
    const text = await m.registry.metrics();
    for (const path of ['inline', 'pool', 'none'])
      assert.match(
        text,
        new RegExp(`rollcall_admission_duration_seconds_count\\{policy="p",path="${path}"\\} 1`),
      );
  });

  test('read the pool’s threads at scrape time', async () => {
    const m = new PolicyServerMetrics();
    let stats = { threads: 3, busy: 1, queued: 0 };
    m.watchPool(() => stats);
    assert.match(await m.registry.metrics(), /rollcall_evaluation_threads\{state="idle"\} 2/);
    stats = { threads: 4, busy: 4, queued: 5 };
    const text = await m.registry.metrics();
    assert.match(text, /rollcall_evaluation_threads\{state="busy"\} 4/);
    assert.match(text, /rollcall_evaluation_queued_requests 5/);
  });
});
