// What an error from the Kubernetes API says, whichever client raised it. client-node's
// generated clients throw ApiException { code, headers }, its Watch and rollcall's own
// getJson (lib/kube/api.ts) carry `statusCode`; both are read structurally, so tests
// and other HTTP clients can produce the same shapes.

/**
 * The HTTP status of an API error, or undefined for anything else (a network error's `code`
 * is a string such as 'ECONNREFUSED', so it never counts).
 */
export function statusCodeOf(err: unknown): number | undefined {
  if (typeof err !== 'object' || err === null) return undefined;
  const { statusCode, code } = err as { statusCode?: unknown; code?: unknown };
  if (typeof statusCode === 'number') return statusCode;
  return typeof code === 'number' ? code : undefined;
}

/** A response header of an API error (client-node's ApiException keeps them), by any case. */
export function responseHeaderOf(err: unknown, name: string): string | undefined {
  if (typeof err !== 'object' || err === null) return undefined;
  const headers = (err as { headers?: unknown }).headers;
  if (typeof headers !== 'object' || headers === null) return undefined;
  const wanted = name.toLowerCase();
  for (const [key, value] of Object.entries(headers))
    if (key.toLowerCase() === wanted && typeof value === 'string') return value;
  return undefined;
}

/** An error in an operator's words: fetch reports "fetch failed" and keeps the reason in `cause`. */
export function errorText(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  return err.cause instanceof Error ? `${err.message}: ${err.cause.message}` : err.message;
}

/** The object (or its namespace) does not exist: 404. */
export function isNotFound(err: unknown): boolean {
  return statusCodeOf(err) === 404;
}

/** A write lost a race (resourceVersion precondition, create of an existing name): 409. */
export function isConflict(err: unknown): boolean {
  return statusCodeOf(err) === 409;
}
