/**
 * The admission path a webhook calls: `/validate/<policy>/<generation>`. The control plane
 * writes it into every webhook configuration (webhook-core.ts); the policy server and the
 * simulator read it back. One builder and one parser, so the two sides cannot drift.
 */

/** What a webhook path names: one generation of one Policy. */
export interface WebhookTarget {
  policy: string;
  generation: number;
}

/**
 * A Kubernetes object name (a DNS-1123 subdomain): dot-separated labels of lowercase
 * alphanumerics and '-', each starting and ending alphanumeric, at most 253 characters.
 */
const OBJECT_NAME = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const OBJECT_NAME_MAX_CHARS = 253;

/**
 * A generation as the builder writes it: no sign, no leading zero, and at most 16 digits,
 * as JavaScript holds integers exactly only up to 2^53 - 1 (also 16 digits).
 */
const GENERATION = /^[1-9][0-9]{0,15}$/;

/** The policy server's admission path for one generation of one Policy. */
export function webhookPath(policy: string, generation: number): string {
  return `/validate/${policy}/${generation}`;
}

/**
 * The inverse of webhookPath: the Policy and generation of a path it built from an object
 * name and a generation ≥ 1; undefined for any other path (no query, no extra segment). The
 * name's length is checked before its pattern runs, so a long hostile path costs nothing.
 */
export function parseWebhookPath(path: string): WebhookTarget | undefined {
  const segments = path.split('/');
  if (segments.length !== 4 || segments[0] !== '' || segments[1] !== 'validate') return undefined;
  const [, , policy, digits] = segments as [string, string, string, string];
  if (policy.length > OBJECT_NAME_MAX_CHARS || !OBJECT_NAME.test(policy)) return undefined;
  if (!GENERATION.test(digits)) return undefined;
  const generation = Number(digits);
  return Number.isSafeInteger(generation) ? { policy, generation } : undefined;
}
