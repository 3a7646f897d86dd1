// Turns errors thrown by a handler into outcomes. @kubernetes/client-node 2.x throws
// ApiException { code, body, headers }; we recognise it structurally so that tests and
// other HTTP clients can produce the same shape.

import { retry, terminal, TerminalError, type Outcome } from './outcome.ts';

/** The part of client-node's ApiException that matters here. */
export interface HttpStatusError {
  code: number;
  headers?: Record<string, string | undefined>;
}

export function isHttpStatusError(err: unknown): err is HttpStatusError {
  return (
    typeof err === 'object' &&
    err !== null &&
    typeof (err as { code?: unknown }).code === 'number' &&
    ((err as { headers?: unknown }).headers === undefined ||
      typeof (err as { headers?: unknown }).headers === 'object')
  );
}

/** Used when a 429 carries no usable Retry-After. */
export const defaultRetryAfterMs = 1000;
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

function header(
  headers: Record<string, string | undefined> | undefined,
  name: string,
): string | undefined {
  if (!headers) return undefined;
  for (const [key, value] of Object.entries(headers)) if (key.toLowerCase() === name) return value;
  return undefined;
}

/** 429 → throttled(Retry-After), 409 → conflict, anything else → undefined. */
export function httpOutcome(err: unknown, now: number = Date.now()): Outcome | undefined {
  if (!isHttpStatusError(err)) return undefined;
  if (err.code === 429) {
    const delayMs = parseRetryAfter(header(err.headers, 'retry-after'), now) ?? defaultRetryAfterMs;
    return { kind: 'throttled', delayMs };
  }
  if (err.code === 409) return { kind: 'conflict' };
  return undefined;
}

/** Thrown errors are retryable unless marked terminal; 429 and 409 get their own outcomes. */
export function outcomeOfError(err: unknown): Outcome {
  if (err instanceof TerminalError) return terminal(err.message);
  const http = httpOutcome(err);
  if (http) return http;
  return retry(err instanceof Error ? err : new Error(String(err)));
}
