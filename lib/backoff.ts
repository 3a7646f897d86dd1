// Exponential backoff with jitter, as pure functions so they are testable: the queue's per-key
// retries (like controller-runtime's ItemExponentialFailureRateLimiter) and the reflector's
// list/watch retries use this one module, each with its own defaults.

export interface BackoffOptions {
  /** Delay after the first failure, in ms. */
  baseMs: number;
  /** Upper bound of any delay, in ms. */
  capMs: number;
  /** Growth per consecutive failure. */
  factor: number;
  /**
   * Fraction of the delay that is random, 0..1: a delay d becomes a uniform value in
   * [d·(1 − jitter), d], so that keys or clients that failed together spread out.
   */
  jitter: number;
}

/** The queue's per-key retries: 100 ms doubling to 5 minutes, 20 % jitter. */
export const defaultBackoff: BackoffOptions = {
  baseMs: 100,
  capMs: 5 * 60_000,
  factor: 2,
  jitter: 0.2,
};

/**
 * Delay before the next attempt after `failures` consecutive failures (failures ≥ 1):
 * `min(capMs, baseMs · factor^(failures-1))`, reduced by up to `jitter` of itself.
 * `random` returns a number in [0, 1) (injected so tests are deterministic).
 */
export function backoffDelay(
  failures: number,
  opts: BackoffOptions = defaultBackoff,
  random: () => number = Math.random,
): number {
  const exponent = Math.max(0, failures - 1);
  // factor^exponent overflows to Infinity for huge counts; Math.min caps it either way.
  const raw = Math.min(opts.capMs, opts.baseMs * opts.factor ** exponent);
  const jitter = Math.min(1, Math.max(0, opts.jitter));
  return Math.round(raw * (1 - jitter * random()));
}

/**
 * `base` spread over [base, 2·base), as client-go does for watch timeouts, so that
 * watches started together do not all end (and reconnect) together.
 */
export function spread(base: number, random: () => number = Math.random): number {
  return Math.round(base * (1 + random()));
}
