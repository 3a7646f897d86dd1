import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { PolicyServerMetrics } from '../../../data-plane/metrics.ts';

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

  test('export the event loop’s delay p99 since the previous scrape, which rises while the loop is blocked', async () => {
    const m = new PolicyServerMetrics();
    const read = async (name: string) => {
      const line = (await m.registry.metrics()).split('\n').find((l) => l.startsWith(`${name} `));
      assert.ok(line, `${name} is exported`);
      return Number(line.split(' ')[1]);
    };
    await new Promise((r) => setTimeout(r, 100));
    await read('nodejs_eventloop_lag_p99_seconds'); // the window starts again at each scrape
    // monitorEventLoopDelay records the time between two of its 10 ms ticks; the first
    // interval after a reset is not recorded, so the block starts a few ticks later.
    await new Promise((r) => setTimeout(r, 50));
    const blockedUntil = performance.now() + 300;
    while (performance.now() < blockedUntil); // a policy evaluated on the main thread, say
    await new Promise((r) => setTimeout(r, 30));
    assert.ok((await read('nodejs_eventloop_lag_p99_seconds')) >= 0.29);
    await new Promise((r) => setTimeout(r, 300));
    const max = await read('nodejs_eventloop_lag_max_seconds');
    assert.ok(max < 0.29, `the block is out of the next window (max ${max} s)`);
  });

  test('read the HTTPS server’s connections and requests in flight at scrape time, and count refusals', async () => {
    const m = new PolicyServerMetrics();
    m.watchIngress(() => ({ connections: 7, inFlight: 3 }));
    m.connectionRefused();
    m.handshakeFailed('timeout');
    m.admissionRefused('overloaded');
    m.admissionRefused('too_large');
    const text = await m.registry.metrics();
    for (const line of [
      'rollcall_open_connections 7',
      'rollcall_admission_requests_in_flight 3',
      'rollcall_connections_refused_total 1',
      'rollcall_tls_handshake_failures_total{reason="timeout"} 1',
      'rollcall_admission_refused_total{reason="overloaded"} 1',
      'rollcall_admission_refused_total{reason="too_large"} 1',
    ])
      assert.ok(text.includes(`\n${line}\n`), line);
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
