import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  EventRecorder,
  type PendingEvent,
} from '../../../control-plane/functions/event-recorder.ts';

const regarding = { apiVersion: 'rollcall.dev/v1alpha1', kind: 'Policy', name: 'p' };
const event = (reason: string) => ({ type: 'Normal' as const, reason, action: 'Load', note: '' });
const at = new Date(0);

/** A recorder whose writes wait until the test releases them, in order. */
function gated(opts: { writers?: number; limit?: number; failing?: string } = {}) {
  const started: string[] = [];
  const releases: (() => void)[] = [];
  const failed: string[] = [];
  const dropped: [string, boolean][] = [];
  const recorder = new EventRecorder({
    ...opts,
    write: ({ event }: PendingEvent) => {
      started.push(event.reason);
      return new Promise<void>((resolve, reject) =>
        releases.push(() => (event.reason === opts.failing ? reject(new Error('503')) : resolve())),
      );
    },
    failed: ({ event }) => void failed.push(event.reason),
    dropped: ({ event }, first) => void dropped.push([event.reason, first]),
  });
  const releaseOne = async () => {
    releases.shift()!();
    await new Promise((resolve) => setImmediate(resolve));
  };
  return { recorder, started, failed, dropped, releaseOne };
}

describe('Events written in the background', () => {
  test('record returns at once; at most `writers` Events are written at a time, in order', async () => {
    const { recorder, started, releaseOne } = gated({ writers: 2 });
    for (const r of ['a', 'b', 'c']) recorder.record(regarding, event(r), at);
    assert.deepEqual(started, ['a', 'b']);
    assert.equal(recorder.pending, 3);
    await releaseOne();
    assert.deepEqual(started, ['a', 'b', 'c']);
    await releaseOne();
    await releaseOne();
    assert.equal(recorder.pending, 0);
  });

  test('a failed write is reported and the next Events are still written', async () => {
    const { recorder, started, failed, releaseOne } = gated({ writers: 1, failing: 'a' });
    recorder.record(regarding, event('a'), at);
    recorder.record(regarding, event('b'), at);
    await releaseOne();
    assert.deepEqual(failed, ['a']);
    assert.deepEqual(started, ['a', 'b']);
  });

  test('past the limit new Events are dropped, the first of each burst marked', async () => {
    const { recorder, dropped, releaseOne } = gated({ writers: 1, limit: 2 });
    for (const r of ['a', 'b', 'c', 'd']) recorder.record(regarding, event(r), at);
    assert.deepEqual(dropped, [
      ['c', true],
      ['d', false],
    ]);
    await releaseOne();
    recorder.record(regarding, event('e'), at); // room for one again, still the same burst
    recorder.record(regarding, event('f'), at);
    await releaseOne();
    await releaseOne();
    recorder.record(regarding, event('g'), at); // the backlog emptied: a new burst
    recorder.record(regarding, event('h'), at);
    recorder.record(regarding, event('i'), at);
    assert.deepEqual(dropped.slice(2), [
      ['f', false],
      ['i', true],
    ]);
  });

  test('drain resolves once everything is written, or false when time is up', async () => {
    const { recorder, releaseOne } = gated({ writers: 1 });
    assert.equal(await recorder.drain(10), true, 'nothing pending');
    recorder.record(regarding, event('a'), at);
    assert.equal(await recorder.drain(10), false);
    const drained = recorder.drain(1000);
    await releaseOne();
    assert.equal(await drained, true);
  });
});
