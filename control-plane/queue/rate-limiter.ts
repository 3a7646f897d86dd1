// The write gate shared by every worker process: a 429 from the API server pauses all writes
// for its Retry-After, and narrows the process's window of writes in flight (write-window.ts).
// By default that is all: the apiserver's API Priority and Fairness decides how fast writes go
// (as controller-runtime does since kubernetes-sigs/controller-runtime#3119).
// An opt-in cap (`ratePerSecond`) adds one token bucket in Redis for all writes; time comes
// from Redis (TIME) so that clocks of worker hosts do not matter.

import { statusCodeOf } from '../../lib/kube/errors.ts';
import { keyPrefix, type RedisClient } from '../../lib/redis/client.ts';
import { RedisScript } from '../../lib/redis/script.ts';
import { WriteWindow } from './write-window.ts';

/** Sends one write to the Kubernetes API through the write gate. */
export type WriteGate = <T>(write: () => Promise<T>) => Promise<T>;

export interface WriteRateLimitOptions {
  /** Sustained writes per second across all workers; undefined (the default): no cap. */
  ratePerSecond: number | undefined;
  /** Writes allowed at once after a quiet period, with a cap. Default twice the rate. */
  burst: number | undefined;
  /**
   * Redis key of the bucket; the pause key is `<key>:paused`. Default
   * `rollcall:ratelimit:kube-writes` (`{rollcall}:...` on a Cluster: both keys in one slot).
   */
  key: string;
  /**
   * Without a cap, how long this process trusts its last look at the pause before asking
   * Redis again. A 429 elsewhere pauses this process within that time (its own at once), and
   * a write costs no Redis round trip of its own. Default 250 ms.
   */
  pauseCheckMs: number;
}

export const defaultWriteRateLimit: WriteRateLimitOptions = {
  ratePerSecond: undefined,
  burst: undefined,
  key: 'rollcall:ratelimit:kube-writes',
  pauseCheckMs: 250,
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

/**
 * Writes count as congested while this many are in flight and their moving mean takes longer
 * than `slowWriteMs`: the API server, not the worker, is where runs wait. On the local cluster a
 * status write takes 5–8 ms idle and 35–60 ms in a storm of a thousand policies.
 */
const congestedInFlight = 4;
const slowWriteMs = 20;

export class WriteRateLimiter {
  readonly opts: WriteRateLimitOptions;
  readonly window = new WriteWindow();
  private readonly redis: RedisClient;
  /** Moving mean of a write's duration (ms), each new write weighing a fifth. */
  private meanWriteMs = 0;
  /** Without a cap: the pause as last seen (epoch ms it ends), and when it was looked at. */
  private pausedUntil = 0;
  private pauseSeenAt = -Infinity;

  constructor(redis: RedisClient, opts: Partial<WriteRateLimitOptions> = {}) {
    this.redis = redis;
    this.opts = {
      ...defaultWriteRateLimit,
      key: `${keyPrefix(redis)}:ratelimit:kube-writes`,
      ...opts,
    };
  }

  /** Takes a token if one is there (or only checks the pause, without a cap): 0, else how many ms until one may be. */
  async tryAcquire(): Promise<number> {
    const { key, ratePerSecond, burst, pauseCheckMs } = this.opts;
    if (ratePerSecond === undefined) {
      const now = Date.now();
      if (now - this.pauseSeenAt >= pauseCheckMs) {
        this.pausedUntil = now + Math.max(0, await this.redis.pttl(`${key}:paused`));
        this.pauseSeenAt = now;
      }
      return Math.max(0, this.pausedUntil - now);
    }
    return Number(
      await takeToken.run(
        this.redis,
        [key, `${key}:paused`],
        [ratePerSecond, burst ?? 2 * ratePerSecond],
      ),
    );
  }

  /** Waits for a write token (and the end of a pause). */
  async acquireWriteToken(signal?: AbortSignal): Promise<void> {
    for (;;) {
      signal?.throwIfAborted();
      const waitMs = await this.tryAcquire();
      if (waitMs <= 0) return;
      await new Promise<void>((resolve) => setTimeout(resolve, waitMs).unref?.());
    }
  }

  /**
   * Sends `write` once the window has room and then a token is had (so a write let into the
   * window still waits out a pause that began meanwhile); a 429 narrows the window.
   */
  async write<T>(write: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    await this.window.enter(signal);
    let throttled = false;
    try {
      await this.acquireWriteToken(signal);
      const started = performance.now();
      const result = await write();
      this.meanWriteMs += (performance.now() - started - this.meanWriteMs) / 5;
      return result;
    } catch (err) {
      throttled = statusCodeOf(err) === 429;
      throw err;
    } finally {
      this.window.leave(throttled);
    }
  }

  /** True while writes queue at the API server (`congestedInFlight`, `slowWriteMs`). */
  get congested(): boolean {
    return this.window.inFlight >= congestedInFlight && this.meanWriteMs > slowWriteMs;
  }

  /** Stops all writes for `ms` (a 429's Retry-After), in every worker process. */
  async pause(ms: number): Promise<void> {
    if (ms <= 0) return;
    this.pausedUntil = Math.max(this.pausedUntil, Date.now() + ms);
    await pauseBucket.run(this.redis, [`${this.opts.key}:paused`], [Math.ceil(ms)]);
  }
}
