import assert from 'node:assert/strict';
import { test } from 'node:test';
import { WriteWindow } from '../../../control-plane/queue/write-window.ts';

/** Enters `n` writes at once and says how many got in before the event loop moved on. */
async function enterMany(w: WriteWindow, n: number): Promise<{ entered: () => number }> {
  let entered = 0;
  for (let i = 0; i < n; i++) void w.enter().then(() => entered++);
  await new Promise((r) => setImmediate(r));
  return { entered: () => entered };
}

test('the window is open (unlimited) until a 429', async () => {
  const w = new WriteWindow();
  const { entered } = await enterMany(w, 200);
  assert.equal(entered(), 200);
  assert.equal(w.size, Infinity);
});

test('a 429 halves the writes in flight; the next ones wait for room', async () => {
  const w = new WriteWindow();
  await enterMany(w, 20);
  w.leave(true); // 20 were in flight
  assert.equal(w.size, 10);
  const { entered } = await enterMany(w, 5);
  assert.equal(entered(), 0, 'still 19 in flight for a window of 10');
  for (let i = 0; i < 8; i++) w.leave(false);
  await new Promise((r) => setImmediate(r));
  assert.equal(entered(), 0, '11 in flight for a window of a little over 10');
  w.leave(false);
  await new Promise((r) => setImmediate(r));
  assert.equal(entered(), 1, 'the 9th success made room for one');
  assert.equal(w.inFlight, 11);
});

test('429s narrow it to one write at a time, never to none', async () => {
  const w = new WriteWindow();
  await enterMany(w, 8);
  for (let i = 0; i < 8; i++) w.leave(true);
  assert.equal(w.size, 1);
  const { entered } = await enterMany(w, 3);
  assert.equal(entered(), 1);
});

test('successes widen it by about one per round of writes, and past `open` it is unlimited again', async () => {
  const w = new WriteWindow(8);
  await enterMany(w, 1);
  w.leave(true);
  assert.equal(w.size, 1);
  let writes = 0;
  while (w.size !== Infinity) {
    await w.enter();
    w.leave(false);
    writes++;
    assert.ok(writes < 100, `still ${w.size} after ${writes} writes`);
  }
  // 1 + 1 + 1/2 + 1/2.5 + ... : about size²/2 successes to reach size 8.
  assert.ok(writes >= 20 && writes <= 40, `${writes} successes to open from 1 to 8`);
});

test('an aborted wait leaves the window as it was', async () => {
  const w = new WriteWindow();
  await enterMany(w, 2);
  w.leave(true);
  assert.equal(w.size, 1);
  const abort = new AbortController();
  const waiting = w.enter(abort.signal);
  abort.abort();
  await assert.rejects(waiting, { name: 'AbortError' });
  const next = w.enter();
  w.leave(false);
  await next; // woken by the room left, not lost to the aborted waiter
  assert.equal(w.inFlight, 1);
});
