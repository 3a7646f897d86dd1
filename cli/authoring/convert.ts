/**
 * Conversion between a rollcall Policy and Kubernetes' ValidatingAdmissionPolicy (VAP) with its
 * ValidatingAdmissionPolicyBinding (admissionregistration.k8s.io/v1), as pure functions:
 * policyToVap (convert-to-vap.ts) and vapToPolicies (convert-from-vap.ts). This module holds
 * what both directions share: the result's shape, the annotations a converted VAP carries, and
 * the CEL helpers that rewrite expressions in place.
 *
 * Whatever does not carry over is named: a `note` when the meaning is kept, `lost: true` when
 * it is not (the command then exits 1).
 */
import type { ASTNode } from '@marcbachmann/cel-js';

export const VAP_API_VERSION = 'admissionregistration.k8s.io/v1';
/** On a converted VAP: the variable that holds the Policy's settings. */
export const SETTINGS_VARIABLE_ANNOTATION = 'rollcall.dev/settings-variable';
/** On a converted VAP and binding: the Policy it came from. */
export const CONVERTED_FROM_ANNOTATION = 'rollcall.dev/converted-from';

export interface ConversionNote {
  /** The field it is about, e.g. `spec.timeoutSeconds`. */
  field: string;
  message: string;
  /** True when the meaning does not carry over. */
  lost: boolean;
}

export type Conversion =
  | { ok: true; objects: Record<string, unknown>[]; notes: ConversionNote[] }
  | { ok: false; errors: string[] };

export interface ConvertOptions {
  /** rollcall's namespace, excluded by every webhook (default rollcall-system). */
  rollcallNamespace?: string;
  protectedNamespaces?: readonly string[];
  /** VAP → Policy: the PolicyServer of the Policies (default `default`). */
  policyServer?: string;
}

// ---------------------------------------------------------------- CEL helpers

export const isNode = (v: unknown): v is ASTNode =>
  typeof v === 'object' && v !== null && 'op' in v;

/** `source` with each range replaced by `text`. */
export function replaceRanges(
  source: string,
  ranges: readonly [number, number][],
  text: string,
): string {
  let out = source;
  for (const [start, end] of [...ranges].sort((a, b) => b[0] - a[0]))
    out = out.slice(0, start) + text + out.slice(end);
  return out;
}
