import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Redis } from 'ioredis';
import { WriteRateLimiter } from '../../../queue/rate-limiter.ts';
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
