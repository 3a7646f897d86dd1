import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Registry } from 'prom-client';
import { reflectorMetrics } from '../../../control-plane/watcher/metrics.ts';

describe('reflectorMetrics', () => {
  test('counts restarts, relists, events and failures per resource in the given registry', async () => {
    const registry = new Registry();
    const pods = reflectorMetrics(registry, 'pods');
    const policies = reflectorMetrics(registry, 'policies'); // same counters, no double registration
    pods.watchRestarted?.('stale');
    pods.watchRestarted?.('stale');
    policies.relisted?.('gone');
    pods.received?.('ADDED');
    pods.failed?.('watch', new Error('boom'));
    const text = await registry.metrics();
    assert.match(text, /rollcall_watch_restarts_total\{resource="pods",reason="stale"\} 2/);
    assert.match(text, /rollcall_watch_relists_total\{resource="policies",reason="gone"\} 1/);
    assert.match(text, /rollcall_watch_events_total\{resource="pods",type="ADDED"\} 1/);
    assert.match(text, /rollcall_watch_failures_total\{resource="pods",stage="watch"\} 1/);
  });

  test('leaves the global registry alone', async () => {
    const { register } = await import('prom-client');
    reflectorMetrics(new Registry(), 'pods');
    assert.equal(register.getSingleMetric('rollcall_watch_restarts_total'), undefined);
  });
});
