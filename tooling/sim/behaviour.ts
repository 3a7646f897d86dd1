// The simulated policy server's behaviour, as a pure function of a policy's `module` URL.
// Dev tooling for the local cluster only: a real policy server loads real modules.
import { createHash } from 'node:crypto';
import type { ReportEntry } from '../../api/report.ts';

/** What a policy at one generation is, from a replica's point of view. */
export interface SimPolicy {
  name: string;
  /** The Policy's metadata.uid, written into every entry (report contract v2). */
  uid: string;
  generation: number;
  module: string;
}

/**
 * sim://ok loads; sim://fail?message=TEXT fails with TEXT; sim://slow?ms=N reports Loading
 * for N ms, then Loaded; sim://flaky?p=P fails on each replica with probability P;
 * sim://deny?message=TEXT loads and denies every request it is asked about. Other URLs are
 * a real server's business: the simulator leaves them out of its report.
 */
const behaviours = {
  ok: () => ({}),
  fail: (q) => ({ message: q.get('message') ?? 'policy failed to load' }),
  slow: (q) => ({ ms: Math.max(0, Number(q.get('ms') ?? 5000) || 0) }),
  flaky: (q) => ({ p: Math.min(1, Math.max(0, Number(q.get('p') ?? 0.5) || 0)) }),
  deny: (q) => ({ message: q.get('message') ?? 'denied by policy' }),
} satisfies Record<string, (query: URLSearchParams) => object>;

type Kind = keyof typeof behaviours;

/** A `sim://` module's behaviour: its kind and what its query says; `unknown` for any other URL. */
export type Behaviour =
  { [K in Kind]: { kind: K } & ReturnType<(typeof behaviours)[K]> }[Kind] | { kind: 'unknown' };

export function behaviourOf(module: string): Behaviour {
  let url: URL;
  try {
    url = new URL(module);
  } catch {
    return { kind: 'unknown' };
  }
  const kind = url.hostname || url.pathname.replace(/^\/\//, '');
  if (url.protocol !== 'sim:' || !Object.hasOwn(behaviours, kind)) return { kind: 'unknown' };
  return { kind, ...behaviours[kind as Kind](url.searchParams) } as Behaviour;
}

/** A stable draw in [0, 1) per replica and generation, so a flaky policy's verdict does not flap between reports. */
function draw(pod: string, policy: SimPolicy): number {
  const digest = createHash('sha256').update(`${pod}/${policy.name}/${policy.generation}`).digest();
  return digest.readUInt32BE(0) / 2 ** 32;
}

/**
 * The entry a replica reports for one policy. `previous` is what it reported last (for this
 * or an older generation) and
 * `loadingSince` when it began loading this generation. Returns the entry and, for a slow
 * module still loading, when to report again.
 */
export function reportEntry(
  pod: string,
  policy: SimPolicy,
  previous: ReportEntry | undefined,
  loadingSince: number,
  now: number,
): { entry: ReportEntry; recheckAt?: number } | undefined {
  const behaviour = behaviourOf(policy.module);
  // An entry about a deleted namesake says nothing about this Policy.
  if (previous?.uid !== policy.uid) previous = undefined;
  // A failed reload keeps enforcing what this replica had loaded before.
  const serving =
    previous === undefined
      ? undefined
      : previous.generation === policy.generation
        ? previous.serving
        : previous.state === 'Loaded'
          ? previous.generation
          : previous.serving;
  const { uid, generation } = policy;
  const failed = (message: string) => ({
    entry: {
      uid,
      generation,
      state: 'Failed' as const,
      message,
      ...(serving ? { serving } : {}),
    },
  });
  const loaded = { entry: { uid, generation, state: 'Loaded' as const } };
  switch (behaviour.kind) {
    case 'unknown':
      return undefined;
    case 'ok':
    case 'deny':
      return loaded;
    case 'fail':
      return failed(behaviour.message);
    case 'flaky':
      return draw(pod, policy) < behaviour.p ? failed(`flaky module failed on ${pod}`) : loaded;
    case 'slow': {
      const readyAt = loadingSince + behaviour.ms;
      if (now >= readyAt) return loaded;
      return {
        entry: { uid, generation, state: 'Loading', ...(serving ? { serving } : {}) },
        recheckAt: readyAt,
      };
    }
  }
}
