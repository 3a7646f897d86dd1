/**
 * The load lifecycle of one replica, as pure functions: which (policy uid, generation) pairs
 * it must load, which loads to start or drop, what it reports, and whether it is ready.
 *
 * A replica needs, for each Policy of its server, the current generation (its spec comes from
 * the Policy) and, when it differs, `status.servedGeneration` (its spec comes from the
 * PolicyRevision `<policy>-<generation>`, which must carry the Policy's uid): the webhook pins
 * the served generation, so a replica must be able to answer for it while the current one
 * loads or is broken. Each needed pair goes Loading → Loaded | Failed.
 */
import { z } from 'zod';
import { REPORT_MESSAGE_MAX_CHARS, revisionName } from '../api/constants.ts';
import type { ReplicaReport, ReportEntry } from '../api/report.ts';
import {
  actionsOf,
  policyRevisionSpecSchema,
  policySpecSchema,
  type PolicySpec,
  type ValidationAction,
} from '../api/v1alpha1.ts';

/** `uid/generation`: one loadable unit. A Policy deleted and created again has another uid. */
export type LoadKey = string;
export const loadKey = (uid: string, generation: number): LoadKey => `${uid}/${generation}`;

/** Cuts a message to the report's limit, saying that it was cut. */
export function clip(message: string, max = REPORT_MESSAGE_MAX_CHARS): string {
  return message.length <= max ? message : `${message.slice(0, max - 1)}…`;
}

/** One generation this replica must load. */
export interface Need {
  key: LoadKey;
  policy: string;
  uid: string;
  generation: number;
  /** `current`: from the Policy; `served`: from its PolicyRevision. */
  origin: 'current' | 'served';
  /** The spec to load, when there is one. */
  spec?: PolicySpec;
  /**
   * Why this generation cannot load without even trying (an invalid spec, a module policy, a
   * missing revision). `retry: true` when it may resolve on its own (the revision may appear).
   */
  problem?: { message: string; retry: boolean };
}

/** The earliest background retry due among `states`, if any. */
export function nextRetryAt(states: ReadonlyMap<LoadKey, LoadState>): number | undefined {
  let next: number | undefined;
  for (const state of states.values())
    if (state.state === 'Failed' && state.retryAt !== undefined)
      next = Math.min(next ?? Infinity, state.retryAt);
  return next;
}

/** What the replica knows of one of its Policies. */
export interface PolicyEntry {
  name: string;
  uid: string;
  generation: number;
  servedGeneration?: number;
  /** The current generation's need, and the served one's when it differs. */
  current: Need;
  served?: Need;
}

export type LoadState =
  | { state: 'Loading'; since: number }
  | { state: 'Loaded'; spec: PolicySpec; code: unknown; loadedAt: number }
  | {
      state: 'Failed';
      message: string;
      /** Load again as soon as the need has a spec (a revision that was missing). */
      retry?: boolean;
      /** Try again in the background at this time (a download that may succeed later). */
      retryAt?: number;
      /** Failed attempts so far, for the backoff. */
      attempts?: number;
    };

const policyObjectSchema = z.looseObject({
  metadata: z.looseObject({
    name: z.string().min(1),
    uid: z.string().min(1),
    generation: z.int().min(1).optional(),
  }),
  spec: z.unknown(),
  status: z.looseObject({ servedGeneration: z.unknown().optional() }).optional(),
});

const revisionObjectSchema = z.looseObject({
  metadata: z.looseObject({ name: z.string().min(1) }),
  spec: policyRevisionSpecSchema,
});

export const MODULE_MESSAGE =
  'module policies run only under the simulator (rollcall sim); use spec.validations or spec.source';

/** A zod error as one line: `path: message; path: message`. */
export function zodMessage(error: z.ZodError, prefix: string): string {
  return error.issues
    .map((issue) => {
      const path = [prefix, ...issue.path.map(String)].filter(Boolean).join('.');
      return `${path}: ${issue.message}`;
    })
    .join('; ');
}

/** A spec as the replica reads it: parsed, or the problem that keeps it from loading. */
function readSpec(raw: unknown, where: string): Pick<Need, 'spec' | 'problem'> {
  const parsed = policySpecSchema.safeParse(raw);
  if (!parsed.success)
    return {
      problem: { message: clip(`invalid ${zodMessage(parsed.error, where)}`), retry: false },
    };
  if (
    parsed.data.module !== undefined &&
    parsed.data.validations === undefined &&
    !parsed.data.source
  )
    return { spec: parsed.data, problem: { message: MODULE_MESSAGE, retry: false } };
  return { spec: parsed.data };
}

/**
 * The Policies of this server and every generation to load. Objects that are not even
 * Policies (no name or uid) are skipped: the apiserver never sends them.
 */
export function neededLoads(
  policies: readonly unknown[],
  revisions: readonly unknown[],
): PolicyEntry[] {
  const revisionsByName = new Map<string, z.output<typeof revisionObjectSchema>>();
  for (const raw of revisions) {
    const parsed = revisionObjectSchema.safeParse(raw);
    if (parsed.success) revisionsByName.set(parsed.data.metadata.name, parsed.data);
  }
  const entries: PolicyEntry[] = [];
  for (const raw of policies) {
    const parsed = policyObjectSchema.safeParse(raw);
    if (!parsed.success) continue;
    const { name, uid } = parsed.data.metadata;
    const generation = parsed.data.metadata.generation ?? 1;
    const served = parsed.data.status?.servedGeneration;
    const servedGeneration =
      typeof served === 'number' && Number.isInteger(served) && served >= 1 ? served : undefined;
    const base = { policy: name, uid };
    const entry: PolicyEntry = {
      name,
      uid,
      generation,
      current: {
        ...base,
        key: loadKey(uid, generation),
        generation,
        origin: 'current',
        ...readSpec(parsed.data.spec, 'spec'),
      },
    };
    if (servedGeneration !== undefined) {
      entry.servedGeneration = servedGeneration;
      if (servedGeneration !== generation)
        entry.served = {
          ...base,
          key: loadKey(uid, servedGeneration),
          generation: servedGeneration,
          origin: 'served',
          ...servedSpec(name, uid, servedGeneration, revisionsByName),
        };
    }
    entries.push(entry);
  }
  return entries.sort((a, b) => a.name.localeCompare(b.name));
}

function servedSpec(
  policy: string,
  uid: string,
  generation: number,
  revisions: ReadonlyMap<string, z.output<typeof revisionObjectSchema>>,
): Pick<Need, 'spec' | 'problem'> {
  const name = revisionName(policy, generation);
  const revision = revisions.get(name);
  if (!revision)
    return {
      problem: {
        message: `served generation ${generation} cannot load: PolicyRevision ${name} not found`,
        retry: true,
      },
    };
  const { spec } = revision;
  if (spec.policyUID !== uid || spec.policy !== policy || spec.generation !== generation)
    return {
      problem: {
        message: `served generation ${generation} cannot load: PolicyRevision ${name} records ${spec.policy} generation ${spec.generation} with uid ${spec.policyUID}, not this Policy (uid ${uid})`,
        retry: true,
      },
    };
  return readSpec(spec.policySpec, `PolicyRevision ${name} spec.policySpec`);
}

/** Every need of every entry. */
export function allNeeds(entries: readonly PolicyEntry[]): Need[] {
  return entries.flatMap((e) => (e.served ? [e.current, e.served] : [e.current]));
}

export interface LoadPlan {
  /** Loads to begin (their state becomes Loading). */
  start: Need[];
  /** Needs that fail without loading, and their state. */
  fail: Array<{ key: LoadKey; state: Extract<LoadState, { state: 'Failed' }> }>;
  /** States no longer needed. */
  drop: LoadKey[];
  /** Failed loads to try again in the background (their state stays Failed meanwhile). */
  retry: Need[];
}

/**
 * What to do at time `now` to bring `states` in line with `needs`. A need in Loading, Loaded
 * or Failed stays as it is, since the spec of a (uid, generation) never changes; a failure
 * marked `retry` (a revision that was missing) is loaded again once the need has a spec, and
 * one with a due `retryAt` (a failed download) is tried again in the background.
 */
export function planLoads(
  needs: readonly Need[],
  states: ReadonlyMap<LoadKey, LoadState>,
  now = 0,
): LoadPlan {
  const plan: LoadPlan = { start: [], fail: [], drop: [], retry: [] };
  const needed = new Set<LoadKey>();
  for (const need of needs) {
    if (needed.has(need.key)) continue;
    needed.add(need.key);
    const state = states.get(need.key);
    if (need.problem) {
      const failed = {
        state: 'Failed' as const,
        message: need.problem.message,
        retry: need.problem.retry,
      };
      if (state?.state !== 'Failed' || state.message !== failed.message)
        plan.fail.push({ key: need.key, state: failed });
      continue;
    }
    if (!state || (state.state === 'Failed' && state.retry)) plan.start.push(need);
    else if (state.state === 'Failed' && state.retryAt !== undefined && state.retryAt <= now)
      plan.retry.push(need);
  }
  for (const key of states.keys()) if (!needed.has(key)) plan.drop.push(key);
  return plan;
}

/**
 * The replica report: one entry per Policy, for its current generation. A Failed current
 * generation carries `serving` when the served (older) generation is Loaded here: what this
 * replica still enforces.
 */
export function buildReport(
  entries: readonly PolicyEntry[],
  states: ReadonlyMap<LoadKey, LoadState>,
): ReplicaReport {
  const report: ReplicaReport = {};
  for (const e of entries) {
    const state = states.get(e.current.key) ?? { state: 'Loading', since: 0 };
    const entry: ReportEntry = { uid: e.uid, generation: e.generation, state: state.state };
    if (state.state === 'Failed') {
      entry.message = clip(state.message);
      const served = e.served && states.get(e.served.key);
      if (e.served && served?.state === 'Loaded' && e.served.generation < e.generation)
        entry.serving = e.served.generation;
    }
    report[e.name] = entry;
  }
  return report;
}

/** What an admission request for `policy` at `generation` runs against. */
export type Target =
  | { kind: 'unknown' }
  | { kind: 'loaded'; key: LoadKey; spec: PolicySpec; code: unknown }
  | {
      kind: 'unavailable';
      message: string;
      failurePolicy: 'Fail' | 'Ignore';
      actions: ValidationAction[];
    };

/**
 * The loaded generation a request for `policy` at `generation` (from the webhook's path)
 * runs against. Anything else answers by the failurePolicy of that generation when this
 * replica knows its spec, else of the current one.
 */
export function targetFor(
  entries: readonly PolicyEntry[],
  states: ReadonlyMap<LoadKey, LoadState>,
  policy: string,
  generation: number,
): Target {
  const entry = entries.find((e) => e.name === policy);
  if (!entry) return { kind: 'unknown' };
  const need = [entry.current, entry.served].find((n) => n?.generation === generation);
  const state = need && states.get(need.key);
  if (need && state?.state === 'Loaded')
    return { kind: 'loaded', key: need.key, spec: state.spec, code: state.code };
  const spec = need?.spec ?? entry.current.spec;
  const why = !need
    ? `it loads generation ${[entry.current, entry.served]
        .filter((n) => n !== undefined)
        .map((n) => n.generation)
        .join(' and ')}`
    : state?.state === 'Failed'
      ? `it failed: ${state.message}`
      : 'it is still loading';
  return {
    kind: 'unavailable',
    message: clip(
      `policy ${policy}: this replica has not loaded generation ${generation} (${why})`,
    ),
    failurePolicy: spec?.failurePolicy ?? 'Fail',
    actions: spec ? actionsOf(spec) : ['Deny'],
  };
}

export interface Readiness {
  ready: boolean;
  detail: string;
}

/**
 * Ready once both watches have synced and every needed generation is Loaded or Failed: a
 * failed policy never keeps the replica unready (it is reported instead).
 */
export function readiness(
  synced: { policies: boolean; revisions: boolean },
  entries: readonly PolicyEntry[],
  states: ReadonlyMap<LoadKey, LoadState>,
): Readiness {
  const unsynced = [
    ...(synced.policies ? [] : ['Policies']),
    ...(synced.revisions ? [] : ['PolicyRevisions']),
  ];
  if (unsynced.length > 0)
    return { ready: false, detail: `waiting for the first list of ${unsynced.join(' and ')}` };
  const waiting: string[] = [];
  let loaded = 0;
  let failed = 0;
  for (const need of allNeeds(entries)) {
    const state = states.get(need.key);
    if (state?.state === 'Loaded') loaded++;
    else if (state?.state === 'Failed') failed++;
    else waiting.push(`${need.policy} generation ${need.generation}`);
  }
  if (waiting.length > 0) {
    const shown = waiting.slice(0, 5).join(', ');
    const more = waiting.length > 5 ? ` and ${waiting.length - 5} more` : '';
    return { ready: false, detail: `loading ${shown}${more}` };
  }
  return {
    ready: true,
    detail: `${entries.length} policies: ${loaded} generations loaded, ${failed} failed`,
  };
}
