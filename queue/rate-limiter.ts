// One token bucket in Redis for all writes to the Kubernetes API, shared by every worker
// process. Time comes from Redis (TIME) so that clocks of worker hosts do not matter.
// A 429 from the API server pauses the whole bucket for its Retry-After.

import type { Redis } from 'ioredis';
import { RedisScript } from './redis-script.ts';

export interface WriteRateLimitOptions {
  /** Sustained writes per second across all workers. Default 50. */
  ratePerSecond: number;
  /** Writes allowed at once after a quiet period. Default 100. */
  burst: number;
  /** Redis key of the bucket; the pause key is `<key>:paused`. Default `rollcall:ratelimit:kube-writes`. */
  key: string;
}

export const defaultWriteRateLimit: WriteRateLimitOptions = {
  ratePerSecond: 50,
  burst: 100,
  key: 'rollcall:ratelimit:kube-writes',
};

// Returns 0 when a token was taken, else the ms to wait before asking again.
const takeToken = new RedisScript(`
local paused = redis.call('PTTL', KEYS[2])
if paused > 0 then return paused end
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1]) or burst
local ts = tonumber(state[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate / 1000)
local wait = 0
if tokens >= 1 then tokens = tokens - 1 else wait = math.ceil((1 - tokens) * 1000 / rate) end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', now)
redis.call('PEXPIRE', KEYS[1], math.ceil(burst * 1000 / rate) + 1000)
return wait
`);

// Extends the pause, never shortens it.
const pauseBucket = new RedisScript(`
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
end
return 0
`);

export class WriteRateLimiter {
  readonly opts: WriteRateLimitOptions;
  private readonly redis: Redis;

  constructor(redis: Redis, opts: Partial<WriteRateLimitOptions> = {}) {
    this.redis = redis;
    this.opts = { ...defaultWriteRateLimit, ...opts };
  }

  /** Takes a token if one is there: 0, else how many ms until one may be. */
  async tryAcquire(): Promise<number> {
    const { key, ratePerSecond, burst } = this.opts;
    return Number(await takeToken.run(this.redis, [key, `${key}:paused`], [ratePerSecond, burst]));
  }

  /** Waits for a write token. Call it before every write to the Kubernetes API. */
  async acquireWriteToken(signal?: AbortSignal): Promise<void> {
    for (;;) {
      signal?.throwIfAborted();
      const waitMs = await this.tryAcquire();
      if (waitMs <= 0) return;
      await new Promise<void>((resolve) => setTimeout(resolve, waitMs).unref?.());
    }
  }

  /** Stops all writes for `ms` (a 429's Retry-After), in every worker process. */
  async pause(ms: number): Promise<void> {
    if (ms > 0) await pauseBucket.run(this.redis, [`${this.opts.key}:paused`], [Math.ceil(ms)]);
  }
}
