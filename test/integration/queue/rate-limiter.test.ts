import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Redis } from 'ioredis';
import { WriteRateLimiter } from '../../../control-plane/queue/rate-limiter.ts';
import { redisUrl, uniquePrefix } from '../../support/redis.ts';

test('the write bucket allows a burst, then the rate, shared by every client', async () => {
  const clients = [new Redis(redisUrl()), new Redis(redisUrl()), new Redis(redisUrl())];
  const key = `${uniquePrefix('bucket')}:writes`;
  const limiters = clients.map(
    (c) => new WriteRateLimiter(c, { key, ratePerSecond: 50, burst: 10 }),
  );
  try {
    const started = Date.now();
    // 10 from the burst + 25 at 50/s ≈ 500 ms, split over three "processes".
    await Promise.all(
      limiters.map((l, i) =>
        (async () => {
          for (let n = 0; n < (i === 0 ? 15 : 10); n++) await l.acquireWriteToken();
        })(),
      ),
    );
    const elapsed = Date.now() - started;
    assert.ok(elapsed >= 450, `35 writes took ${elapsed} ms, expected ≥ 500 ms minus slack`);
    assert.ok(elapsed < 1500, `35 writes took ${elapsed} ms`);
  } finally {
    await Promise.all(clients.map((c) => c.quit()));
  }
});

test('a pause (from a 429) stops every limiter and is never shortened', async () => {
  const redis = new Redis(redisUrl());
  const limiter = new WriteRateLimiter(redis, { key: `${uniquePrefix('pause')}:writes` });
  try {
    assert.equal(await limiter.tryAcquire(), 0);
    await limiter.pause(800);
    await limiter.pause(100);
    const wait = await limiter.tryAcquire();
    assert.ok(wait > 600 && wait <= 800, `waits ${wait} ms`);
  } finally {
    await redis.quit();
  }
});

test('without a cap, a pause reaches another process within its pause check, and writes ask Redis at most that often', async () => {
  const [a, b] = [new Redis(redisUrl()), new Redis(redisUrl())];
  const key = `${uniquePrefix('nocap-shared')}:writes`;
  const [limiter, other] = [a, b].map((r) => new WriteRateLimiter(r, { key, pauseCheckMs: 200 }));
  try {
    assert.equal(await other!.tryAcquire(), 0);
    await limiter!.pause(1000);
    const seenAt = Date.now();
    let wait = await other!.tryAcquire();
    while (wait === 0) {
      await new Promise((r) => setTimeout(r, 20));
      wait = await other!.tryAcquire();
    }
    const late = Date.now() - seenAt;
    assert.ok(late <= 300, `the other process saw the pause ${late} ms late`);
    assert.ok(wait > 500 && wait <= 1000, `and waits ${wait} ms`);
    const info = async () =>
      Number(/cmdstat_pttl:calls=(\d+)/.exec(await b.info('commandstats'))?.[1] ?? 0);
    const before = await info();
    for (let n = 0; n < 100; n++) await other!.tryAcquire();
    assert.ok((await info()) - before <= 2, '100 writes in a few ms asked Redis at most twice');
  } finally {
    await Promise.all([a.quit(), b.quit()]);
  }
});

test('without a cap (the default) writes never wait, until a pause', async () => {
  const redis = new Redis(redisUrl());
  const limiter = new WriteRateLimiter(redis, { key: `${uniquePrefix('nocap')}:writes` });
  try {
    const started = Date.now();
    for (let n = 0; n < 300; n++) await limiter.acquireWriteToken();
    assert.ok(Date.now() - started < 1000, `300 uncapped writes took ${Date.now() - started} ms`);
    await limiter.pause(300);
    assert.ok((await limiter.tryAcquire()) > 0);
  } finally {
    await redis.quit();
  }
});

test('a write answered 429 narrows the window of writes in flight; other errors do not', async () => {
  const redis = new Redis(redisUrl());
  const limiter = new WriteRateLimiter(redis, { key: `${uniquePrefix('window')}:writes` });
  const fail = (code: number) => () =>
    Promise.reject(Object.assign(new Error(`${code}`), { code }));
  try {
    const slow = () => new Promise((r) => setTimeout(r, 50));
    const writes = [...Array(8)].map(() => limiter.write(slow));
    await new Promise((r) => setTimeout(r, 10));
    await assert.rejects(limiter.write(fail(500)));
    assert.equal(limiter.window.size, Infinity, 'a 500 is no sign of overload');
    await assert.rejects(limiter.write(fail(429)));
    assert.equal(
      limiter.window.size,
      4,
      'half of the 9 in flight when it was answered, rounded down',
    );
    await Promise.all(writes);
    assert.equal(limiter.window.inFlight, 0);
  } finally {
    await redis.quit();
  }
});

test('writes count as congested only while several are in flight and slow', async () => {
  const redis = new Redis(redisUrl());
  const limiter = new WriteRateLimiter(redis, { key: `${uniquePrefix('congested')}:writes` });
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
  try {
    // Fast writes, many at once: not congested.
    await Promise.all(Array.from({ length: 8 }, () => limiter.write(() => sleep(1))));
    let during = await Promise.all([
      ...Array.from({ length: 7 }, () => limiter.write(() => sleep(5))),
      sleep(3).then(() => limiter.congested),
    ]);
    assert.equal(during.at(-1), false, 'fast writes');
    // Slow writes, one at a time: not congested either.
    for (let i = 0; i < 10; i++) await limiter.write(() => sleep(40));
    assert.equal(limiter.congested, false, 'one slow write in flight');
    // Slow writes, several at once: congested while they last, and not once they are done.
    during = await Promise.all([
      ...Array.from({ length: 6 }, () => limiter.write(() => sleep(60))),
      sleep(20).then(() => limiter.congested),
    ]);
    assert.equal(during.at(-1), true, 'six slow writes in flight');
    assert.equal(limiter.congested, false, 'none in flight');
  } finally {
    await redis.quit();
  }
});
