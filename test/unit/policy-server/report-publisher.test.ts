import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ReportPublisher } from '../../../data-plane/report-publisher.ts';

const fast = { baseMs: 1, capMs: 5, factor: 2, jitter: 0 };

describe('publishing the report', () => {
  test('writes a report once, and never again while it does not change', async () => {
    const writes: string[] = [];
    const p = new ReportPublisher({ patch: async (v) => void writes.push(v) });
    p.publish('{"a":1}');
    await p.idle();
    p.publish('{"a":1}');
    await p.idle();
    assert.deepEqual(writes, ['{"a":1}']);
  });

  test('keeps one patch in flight; reports made meanwhile collapse into the latest', async () => {
    const writes: string[] = [];
    let release!: () => void;
    let inFlight = 0;
    let maxInFlight = 0;
    const p = new ReportPublisher({
      patch: async (v) => {
        inFlight++;
        maxInFlight = Math.max(maxInFlight, inFlight);
        writes.push(v);
        if (v === 'first') await new Promise<void>((r) => (release = r));
        inFlight--;
      },
    });
    p.publish('first');
    await new Promise((r) => setImmediate(r));
    p.publish('second');
    p.publish('third');
    release();
    await p.idle();
    assert.deepEqual(writes, ['first', 'third']);
    assert.equal(maxInFlight, 1);
    assert.equal(p.written, 'third');
  });

  test('retries a failed patch with backoff until it succeeds', async () => {
    let calls = 0;
    const errors: number[] = [];
    const p = new ReportPublisher({
      backoff: fast,
      patch: async () => {
        if (++calls < 3) throw new Error('apiserver unavailable');
      },
      onError: (_err, attempt) => errors.push(attempt),
    });
    p.publish('x');
    await p.idle();
    assert.equal(calls, 3);
    assert.deepEqual(errors, [0, 1]);
    assert.equal(p.written, 'x');
  });

  test('a newer report replaces one still being retried', async () => {
    const writes: string[] = [];
    const p = new ReportPublisher({
      backoff: fast,
      patch: async (v) => {
        writes.push(v);
        if (v === 'old') {
          p.publish('new');
          throw new Error('conflict');
        }
      },
    });
    p.publish('old');
    await p.idle();
    assert.deepEqual(writes, ['old', 'new']);
  });
});
