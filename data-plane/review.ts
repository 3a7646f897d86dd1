/**
 * Reading an AdmissionReview v1: JSON, `apiVersion` and `kind`, and a `request` with a `uid`;
 * the rest passes through as it came. The evaluation threads read every review (they get its
 * text) and the main thread only some, so this is checked by hand: zod's import would add
 * ~0.5 s to the start of each thread, and a thread is replaced after each timeout.
 */

const API_VERSION = 'admission.k8s.io/v1';

/** AdmissionReview.request, with the fields the policy server reads checked. */
export type ReviewRequest = Record<string, unknown> & { uid: string; namespace?: string };

export type ParsedReview = { ok: true; request: ReviewRequest } | { ok: false; error: string };

const describe = (v: unknown) =>
  v === null ? 'null' : Array.isArray(v) ? 'an array' : typeof v === 'string' ? `"${v}"` : typeof v;

function problems(review: unknown): string[] {
  if (typeof review !== 'object' || review === null || Array.isArray(review))
    return [`the body is ${describe(review)}, not an object`];
  const { apiVersion, kind, request } = review as Record<string, unknown>;
  const found: string[] = [];
  if (apiVersion !== API_VERSION)
    found.push(`apiVersion: expected "${API_VERSION}", got ${describe(apiVersion)}`);
  if (kind !== 'AdmissionReview')
    found.push(`kind: expected "AdmissionReview", got ${describe(kind)}`);
  if (typeof request !== 'object' || request === null || Array.isArray(request)) {
    found.push(`request: expected an object, got ${describe(request)}`);
    return found;
  }
  const fields = request as Record<string, unknown>;
  if (typeof fields.uid !== 'string' || fields.uid === '')
    found.push(`request.uid: expected a non-empty string, got ${describe(fields.uid)}`);
  for (const name of ['operation', 'namespace', 'name'] as const) {
    const value = fields[name];
    if (value !== undefined && typeof value !== 'string')
      found.push(`request.${name}: expected a string, got ${describe(value)}`);
  }
  return found;
}

/** The request of an AdmissionReview v1 text, or what is wrong with it in words. */
export function parseReview(text: string): ParsedReview {
  let review: unknown;
  try {
    review = JSON.parse(text);
  } catch {
    return { ok: false, error: 'the body is not JSON' };
  }
  const found = problems(review);
  if (found.length > 0)
    return {
      ok: false,
      error: `expected an ${API_VERSION} AdmissionReview with request.uid: ${found.slice(0, 3).join('; ')}`,
    };
  return { ok: true, request: (review as { request: ReviewRequest }).request };
}
