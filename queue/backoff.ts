// Per-key exponential backoff with jitter, like controller-runtime's
// ItemExponentialFailureRateLimiter: base · 2^(failures-1), capped, then jittered.

export interface BackoffOptions {
  /** Delay after the first failure, in ms. Default 100. */
  baseMs: number;
  /** Upper bound of any delay, in ms. Default 5 minutes. */
  capMs: number;
  /**
   * Fraction of the delay that is random, 0..1. Default 0.2: a delay d becomes a uniform
   * value in [d·0.8, d], which spreads retries of many keys failing at once.
   */
  jitter: number;
}

export const defaultBackoff: BackoffOptions = { baseMs: 100, capMs: 5 * 60_000, jitter: 0.2 };

/** Delay before the next run after `failures` consecutive failures (failures ≥ 1). */
export function backoffDelay(
  failures: number,
  opts: BackoffOptions = defaultBackoff,
  random: () => number = Math.random,
): number {
  const exponent = Math.max(0, failures - 1);
  // 2^exponent overflows to Infinity for huge counts; Math.min caps it either way.
  const raw = Math.min(opts.capMs, opts.baseMs * 2 ** exponent);
  const jitter = Math.min(1, Math.max(0, opts.jitter));
  return Math.round(raw * (1 - jitter * random()));
}
