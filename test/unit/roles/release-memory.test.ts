import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, test } from 'node:test';
import { releaseAfterBursts, releaseFreedMemory } from '../../../lib/release-memory.ts';

const rssMiB = () => process.memoryUsage().rss / 2 ** 20;

test('gives the pages of a large freed heap back to the OS, without exposing gc()', () => {
  let garbage: unknown[] | null = [];
  for (let i = 0; i < 600_000; i++) garbage.push({ name: `pod-${i}`, spec: [i, i + 1] });
  garbage = null;
  const before = rssMiB();
  releaseFreedMemory();
  const after = rssMiB();
  // V8 pools the freed pages (~100 MiB here) and would keep them resident without this.
  assert.ok(before - after > 40, `resident ${before.toFixed(0)} → ${after.toFixed(0)} MiB`);
  assert.equal(typeof (globalThis as { gc?: unknown }).gc, 'undefined');
});

describe('releaseAfterBursts', () => {
  const burst = (minWork: number) => {
    const releases: number[] = [];
    const r = releaseAfterBursts({ minWork, quietMs: 50, released: (ms) => releases.push(ms) });
    return { r, releases };
  };

  test('releases once a burst of enough work has been quiet for quietMs', async () => {
    const { r, releases } = burst(10);
    for (let i = 0; i < 10; i++) r.noteWork(1);
    await sleep(150);
    assert.equal(releases.length, 1);
  });

  test('waits while work keeps coming', async () => {
    const { r, releases } = burst(10);
    r.noteWork(10);
    for (let i = 0; i < 5; i++) {
      await sleep(20);
      r.noteWork(1);
    }
    assert.equal(releases.length, 0);
    await sleep(150);
    assert.equal(releases.length, 1);
  });

  test('leaves a small burst alone, and stop() cancels a pending release', async () => {
    const small = burst(10);
    small.r.noteWork(9);
    const stopped = burst(10);
    stopped.r.noteWork(10);
    stopped.r.stop();
    await sleep(150);
    assert.equal(small.releases.length + stopped.releases.length, 0);
  });
});
