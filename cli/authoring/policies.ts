/**
 * Loading a Policy from a file exactly as a policy-server replica loads it: the spec is read by
 * the replica's `neededLoads` (schema, `module`), the code by `loadNeed` (inline code, or the
 * `source` document downloaded and checked against its digest) and checked by
 * `compileWithinBudget` (type check, unsupported libraries, cost estimate). A policy that does
 * not load fails with the very message the replica would put in its report, which rollcall
 * then shows in the Policy's status.
 */
import { API_VERSION } from '../../api/constants.ts';
import type { PolicySpec } from '../../api/v1alpha1.ts';
import {
  compilePolicy,
  compileWithinBudget,
  estimateCost,
  evaluatePolicy,
  type CompiledPolicy,
} from '../../data-plane/cel/index.ts';
import { keepPolicy, type Engine, type EvalPolicy } from '../../data-plane/evaluation.ts';
import { neededLoads } from '../../data-plane/lifecycle.ts';
import { loadNeed, type LoadDeps } from '../../data-plane/load.ts';
import { isRecord, type SourceObject } from './documents.ts';

/** The engine as the policy server's threads use it. */
export const ENGINE: Engine = { compilePolicy, evaluatePolicy };

/** A Policy that loaded: its spec and code as the replica has them, compiled for evaluation. */
export interface LoadedPolicy {
  ok: true;
  name: string;
  generation: number;
  spec: PolicySpec;
  /** `inline` code, or a `url` document. */
  origin: 'inline' | 'url';
  /** What an evaluation thread keeps for the generation (data-plane/evaluation.ts). */
  kept: EvalPolicy & { compiled: CompiledPolicy };
  /** The static cost estimate of all of a request's expressions (cost units). */
  estimatedCost: number;
  source: SourceObject;
}

export interface FailedPolicy {
  ok: false;
  name: string;
  /** The replica's report message. */
  message: string;
  source: SourceObject;
}

export const isPolicyObject = (value: Record<string, unknown>): boolean =>
  value.apiVersion === API_VERSION && value.kind === 'Policy';

export const policyName = (value: Record<string, unknown>): string | undefined => {
  const name = isRecord(value.metadata) ? value.metadata.name : undefined;
  return typeof name === 'string' && name !== '' ? name : undefined;
};

/** The replica's compile: compile, then the cost estimate with the settings as `params`. */
export const REPLICA_COMPILE: LoadDeps['compile'] = compileWithinBudget;

/**
 * Loads one Policy object as a replica would. `settings` replaces `spec.settings` first (eval's
 * `--params`), so the cost estimate sees them too. Never throws.
 */
export async function loadPolicy(
  source: SourceObject,
  options: { settings?: Record<string, unknown>; deps?: Partial<LoadDeps> } = {},
): Promise<LoadedPolicy | FailedPolicy> {
  const raw = source.value;
  const name = policyName(raw) ?? '';
  const failed = (message: string): FailedPolicy => ({ ok: false, name, message, source });
  if (!name) return failed('metadata.name: Required value: a Policy needs a name');
  const metadata = raw.metadata as Record<string, unknown>;
  const spec =
    options.settings && isRecord(raw.spec) ? { ...raw.spec, settings: options.settings } : raw.spec;
  // A file's Policy has no uid yet; the replica needs one to key its loads.
  const object = {
    ...raw,
    metadata: {
      ...metadata,
      uid: typeof metadata.uid === 'string' ? metadata.uid : `file/${name}`,
    },
    spec,
  };
  const [entry] = neededLoads([object], []);
  if (!entry) return failed('metadata: Invalid value: not a Policy the replica can read');
  let outcome: Awaited<ReturnType<typeof loadNeed>>;
  try {
    outcome = await loadNeed(entry.current, { compile: REPLICA_COMPILE, ...options.deps });
  } catch (error) {
    return failed(String(error)); // loadNeed never throws; an engine bug must not crash a command
  }
  if (outcome.state === 'Failed') return failed(outcome.message);

  const evalPolicy: EvalPolicy = {
    code: outcome.code,
    params: outcome.spec.settings,
    failurePolicy: outcome.spec.failurePolicy,
  };
  const kept = keepPolicy(ENGINE, evalPolicy);
  if ('problem' in kept) return failed(kept.problem);
  const compiled = kept.compiled as CompiledPolicy;
  return {
    ok: true,
    name,
    generation: entry.generation,
    spec: outcome.spec,
    origin: outcome.source,
    kept: { ...evalPolicy, compiled },
    estimatedCost: estimateCost(compiled, outcome.spec.settings).total,
    source,
  };
}

/** The Policies among `objects` (other kinds are skipped). */
export const policiesAmong = (objects: readonly SourceObject[]): SourceObject[] =>
  objects.filter((o) => isPolicyObject(o.value));
