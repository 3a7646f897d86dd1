// Retry delays: exponential backoff with jitter, as pure functions so they are testable.

/** How retry delays grow. */
export interface BackoffOptions {
  /** Delay before the first retry. Default 200 ms. */
  initialMs?: number;
  /** Upper bound of any delay. Default 30 s. */
  maxMs?: number;
  /** Growth per consecutive failure. Default 2. */
  factor?: number;
  /**
   * Fraction of the delay that is randomised, 0..1. Default 0.5: a delay lies in
   * [50 %, 100 %] of the exponential value, so clients that failed together spread out.
   */
  jitter?: number;
}

/**
 * Delay before retry number `attempt` (0 for the first retry after a failure):
 * `min(maxMs, initialMs · factor^attempt)`, reduced by up to `jitter` of itself.
 * `random` returns a number in [0, 1) (injected so tests are deterministic).
 */
export function backoffDelay(
  attempt: number,
  options: BackoffOptions = {},
  random: () => number = Math.random,
): number {
  const { initialMs = 200, maxMs = 30_000, factor = 2, jitter = 0.5 } = options;
  const exponential = Math.min(maxMs, initialMs * factor ** Math.max(0, attempt));
  return Math.round(exponential * (1 - jitter * random()));
}

/**
 * `base` spread over [base, 2·base), as client-go does for watch timeouts, so that
 * watches started together do not all end (and reconnect) together.
 */
export function spread(base: number, random: () => number = Math.random): number {
  return Math.round(base * (1 + random()));
}
