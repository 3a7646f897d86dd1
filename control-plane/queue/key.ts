// A job is a key, never a snapshot: `<function>/<name>` or `<function>/<namespace>/<name>`.
// The function part picks the handler; the handler re-reads current state for the rest.

export interface ParsedKey {
  /** Handler name, e.g. `policy` or `policyserver`. */
  function: string;
  /** Present for namespaced objects (`kind/namespace/name`). */
  namespace?: string;
  name: string;
}

// Lowercase function names; object segments are Kubernetes names (DNS labels/subdomains,
// a little more lenient). No `:` anywhere: BullMQ job and deduplication ids cannot hold it.
const functionPattern = /^[a-z][a-z0-9-]{0,62}$/;
const segmentPattern = /^[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$/;

export class InvalidKeyError extends Error {
  override name = 'InvalidKeyError';
}

/** Parses and validates a key; throws InvalidKeyError with the reason. */
export function parseKey(key: string): ParsedKey {
  const parts = key.split('/');
  const [fn, a, b] = parts;
  if (parts.length < 2 || parts.length > 3 || fn === undefined || a === undefined) {
    throw new InvalidKeyError(
      `key ${JSON.stringify(key)} is not <function>/<name> or <function>/<namespace>/<name>`,
    );
  }
  if (!functionPattern.test(fn)) {
    throw new InvalidKeyError(
      `key ${JSON.stringify(key)}: function ${JSON.stringify(fn)} must match ${functionPattern}`,
    );
  }
  for (const segment of parts.slice(1)) {
    if (!segmentPattern.test(segment)) {
      throw new InvalidKeyError(
        `key ${JSON.stringify(key)}: ${JSON.stringify(segment)} is not a valid object name`,
      );
    }
  }
  return b === undefined ? { function: fn, name: a } : { function: fn, namespace: a, name: b };
}

export function formatKey(parsed: ParsedKey): string {
  return parsed.namespace === undefined
    ? `${parsed.function}/${parsed.name}`
    : `${parsed.function}/${parsed.namespace}/${parsed.name}`;
}

/** The function part of a key (no validation; use parseKey at the boundary). */
export function functionOf(key: string): string {
  const slash = key.indexOf('/');
  return slash < 0 ? key : key.slice(0, slash);
}

/**
 * A fresh BullMQ job id for a key. Unique per add, so that a returned id different from
 * the one we asked for tells us the add was coalesced into an existing job. `/` becomes `_`
 * (never in a Kubernetes name) to keep ids URL-safe for Bull Board.
 */
export function newJobId(key: string, unique: string): string {
  return `${key.replaceAll('/', '_')}_${unique}`;
}
