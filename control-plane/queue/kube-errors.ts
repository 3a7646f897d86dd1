// Turns errors thrown by a handler into outcomes. The HTTP status and headers of an API
// error are read by lib/kube/errors.ts, whichever client raised it.

import { isConflict, responseHeaderOf, statusCodeOf } from '../../lib/kube/errors.ts';
import { retry, terminal, TerminalError, type Outcome } from './outcome.ts';

/** Used when a 429 carries no usable Retry-After. */
const defaultRetryAfterMs = 1000;
/** A hostile or broken Retry-After must not park a key for hours. */
export const maxRetryAfterMs = 10 * 60_000;

/** Retry-After (RFC 9110: delay-seconds or an HTTP-date) in ms, or undefined if unusable. */
export function parseRetryAfter(
  value: string | undefined,
  now: number = Date.now(),
): number | undefined {
  if (value === undefined) return undefined;
  const trimmed = value.trim();
  if (/^\d+$/.test(trimmed)) return Math.min(maxRetryAfterMs, Number(trimmed) * 1000);
  const date = Date.parse(trimmed);
  if (Number.isNaN(date)) return undefined;
  return Math.min(maxRetryAfterMs, Math.max(0, date - now));
}

/** 429 → throttled(Retry-After), 409 → conflict, anything else → undefined. */
export function httpOutcome(err: unknown, now: number = Date.now()): Outcome | undefined {
  if (statusCodeOf(err) === 429) {
    const delayMs =
      parseRetryAfter(responseHeaderOf(err, 'retry-after'), now) ?? defaultRetryAfterMs;
    return { kind: 'throttled', delayMs };
  }
  if (isConflict(err)) return { kind: 'conflict' };
  return undefined;
}

/** Thrown errors are retryable unless marked terminal; 429 and 409 get their own outcomes. */
export function outcomeOfError(err: unknown): Outcome {
  if (err instanceof TerminalError) return terminal(err.message);
  const http = httpOutcome(err);
  if (http) return http;
  return retry(err instanceof Error ? err : new Error(String(err), { cause: err }));
}
