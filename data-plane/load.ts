/**
 * Loading one needed generation: take its code (inline `validations`, or the `source`
 * document), compile it and estimate its cost to check it, and say Loaded or Failed with a
 * message that names the field path and the CEL position, or the estimate and the budget.
 * Compiling here only validates; each evaluation worker compiles the same code again once per
 * (uid, generation) and caches it.
 */
import type { PolicySpec } from '../api/v1alpha1.ts';
import { clip, type Need } from './lifecycle.ts';
import {
  fetchSource,
  SourceError,
  type FetchSourceOptions,
  type SourceDocument,
} from './source.ts';

/** The code of a policy, as the CEL engine compiles it (`PolicyCode` of data-plane/cel). */
export type PolicyCodeInput = SourceDocument;

/**
 * The engine's load-time check (`compileWithinBudget` of data-plane/cel: compile, then the
 * cost estimate with the policy's settings as `params`), injected for tests.
 */
export type Compile = (
  code: PolicyCodeInput,
  fieldPath: string,
  settings: unknown,
) => { ok: true } | { ok: false; errors: string[] };

export type LoadOutcome =
  | { state: 'Loaded'; spec: PolicySpec; code: PolicyCodeInput; source: 'inline' | 'url' }
  | {
      state: 'Failed';
      message: string;
      source: 'inline' | 'url' | 'none';
      /** A download that may succeed later (see SourceError.transient). */
      transient?: boolean;
    };

export interface LoadDeps {
  compile: Compile;
  fetch?: (
    source: NonNullable<PolicySpec['source']>,
    options: FetchSourceOptions,
  ) => Promise<SourceDocument>;
  signal?: AbortSignal;
}

/** Loads a need that has a spec and no problem (see planLoads); never throws. */
export async function loadNeed(need: Need, deps: LoadDeps): Promise<LoadOutcome> {
  const spec = need.spec;
  if (!spec || need.problem)
    return { state: 'Failed', message: need.problem?.message ?? 'no spec to load', source: 'none' };
  if (spec.validations) {
    const code: PolicyCodeInput = {
      validations: spec.validations,
      ...(spec.variables ? { variables: spec.variables } : {}),
      ...(spec.matchConditions ? { matchConditions: spec.matchConditions } : {}),
    };
    return compiled(spec, code, 'spec', '', 'inline', deps.compile);
  }
  if (spec.source) {
    let document: SourceDocument;
    try {
      document = await (deps.fetch ?? fetchSource)(spec.source, {
        signal: deps.signal,
        policyServer: spec.policyServer,
      });
    } catch (err) {
      const known = err instanceof SourceError;
      const message = known ? err.message : `spec.source: ${String(err)}`;
      return {
        state: 'Failed',
        message: clip(message),
        source: 'url',
        transient: !known || err.transient,
      };
    }
    // Paths read `spec.source URL: document.validations[0].expression: ...`.
    return compiled(
      spec,
      document,
      'document',
      `spec.source ${spec.source.url}: `,
      'url',
      deps.compile,
    );
  }
  return { state: 'Failed', message: 'the spec has no validations or source', source: 'none' };
}

function compiled(
  spec: PolicySpec,
  code: PolicyCodeInput,
  fieldPath: string,
  prefix: string,
  source: 'inline' | 'url',
  compile: Compile,
): LoadOutcome {
  let result: ReturnType<Compile>;
  try {
    result = compile(code, fieldPath, spec.settings);
  } catch (err) {
    // An engine bug must fail this policy, not the replica.
    return { state: 'Failed', message: clip(`${prefix}compiling failed: ${String(err)}`), source };
  }
  if (!result.ok) {
    const shown = result.errors.slice(0, 5);
    const more = result.errors.length - shown.length;
    return {
      state: 'Failed',
      message: clip(`${prefix}${shown.join('; ')}${more > 0 ? `; and ${more} more errors` : ''}`),
      source,
    };
  }
  return { state: 'Loaded', spec, code, source };
}
