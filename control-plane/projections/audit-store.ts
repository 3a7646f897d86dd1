// The audit's Redis keys, beside the projections of store.ts (same prefix, same slot on a
// Cluster). The watcher writes what exists; the audit function keeps what it judged, so that a
// change re-judges one object, not the namespace. All of it is rebuilt from the cluster when
// Redis loses it (the watcher rewrites the projections, the function judges again).
//
//   <prefix>:proj:audit:objects:<ns>   the audited objects of a namespace (CLUSTER_SCOPE for the
//                                      cluster-scoped ones): `<resource id>/<name>` -> {u, v, l}
//   <prefix>:proj:audit:namespaces     set of the namespaces that hold audited objects
//   <prefix>:proj:audit:resources      resource id -> AuditedResource and whether its watch
//                                      has listed everything (`synced`)
//   <prefix>:proj:audit:changes        namespace -> how many times the watcher changed its
//                                      objects (a run's summary records the count it read)
//   <prefix>:proj:audit:coverage       Policy -> `<uid>/<generation>` whose resources are all
//                                      watched and listed (its first pass can complete)
//   <prefix>:audit:results:<ns>        Policy -> NamespaceResults (what its Report holds);
//                                      field `.` is set once a run wrote the namespace's Reports
//   <prefix>:audit:summary:<policy>    namespace -> NamespaceSummary (the audit-summary
//                                      function adds them up into the Policy's status)
import { keyPrefix, type RedisClient } from '../../lib/redis/client.ts';
import type { AuditResult } from '../../api/audit.ts';
import { resourceId, type AuditedResource } from '../functions/audit-match.ts';
import { RedisScript } from '../../lib/redis/script.ts';

// Atomic, so that an object the watcher files meanwhile keeps its namespace in the set.
const leaveIfEmpty = new RedisScript(`
if redis.call('HLEN', KEYS[1]) == 0 then redis.call('SREM', KEYS[2], ARGV[1]) end
return 0
`);

/**
 * The name cluster-scoped objects are filed under, in place of a namespace: namespaces are DNS
 * labels, so none has a dot, and it is a valid key segment (`audit/cluster.scoped`).
 */
export const CLUSTER_SCOPE = 'cluster.scoped';

/** An audited object as the watcher keeps it. */
export interface AuditedObject {
  /** metadata.uid */
  u: string;
  /** metadata.resourceVersion */
  v: string;
  /** metadata.labels */
  l?: Record<string, string>;
}

export interface WatchedResource extends AuditedResource {
  synced: boolean;
}

/** One judged object: its resourceVersion when judged, the result, its message, when (s). */
export type StoredResult = [
  resourceVersion: string,
  result: AuditResult,
  message: string,
  at: number,
];

/** What one namespace holds about one Policy. */
export interface NamespaceSummary {
  uid: string;
  generation: number;
  /** The namespace's change count (`changes`) its run read the objects at. */
  seen: number;
  /** Pairs its run could not judge yet (answered `retry`): the pass is not complete. */
  pending?: number;
  checked: number;
  failing: number;
  errors: number;
  /** A few failing objects (`Kind namespace/name`), sorted. */
  failures: { object: string; message: string }[];
}

/** A Policy's results in one namespace: its Report, as judged at `generation`. */
export interface NamespaceResults {
  uid: string;
  generation: number;
  /** By object key (`<resource id>/<name>`). */
  results: Record<string, StoredResult>;
  summary: NamespaceSummary;
}

const MARKER = '.';

const parse = <T>(text: string | null | undefined): T | undefined => {
  if (text === null || text === undefined) return undefined;
  try {
    return JSON.parse(text) as T;
  } catch {
    return undefined;
  }
};

export class AuditStore {
  readonly redis: RedisClient;
  private readonly proj: string;
  private readonly own: string;
  private readonly namespaceHash: string;

  constructor(redis: RedisClient, prefix = 'rollcall') {
    this.redis = redis;
    const base = keyPrefix(redis, prefix);
    this.proj = `${base}:proj:audit`;
    this.own = `${base}:audit`;
    this.namespaceHash = `${base}:proj:namespace`;
  }

  private objectsKey(namespace: string): string {
    return `${this.proj}:objects:${namespace}`;
  }

  // ------------------------------------------------------------- written by the watcher

  /** Files an object (or its removal, `object` undefined) under its namespace. */
  async putObject(
    namespace: string,
    key: string,
    object: AuditedObject | undefined,
  ): Promise<void> {
    const hash = this.objectsKey(namespace);
    const multi = this.redis.multi();
    if (object)
      multi.hset(hash, key, JSON.stringify(object)).sadd(`${this.proj}:namespaces`, namespace);
    else multi.hdel(hash, key);
    await multi.hincrby(`${this.proj}:changes`, namespace, 1).exec();
  }

  /**
   * Replaces one resource's objects in every namespace with `objects` (a relist, a rebuild).
   * Returns the namespaces whose objects it changed: only their change counts move.
   */
  async replaceResource(
    id: string,
    objects: ReadonlyMap<string, ReadonlyMap<string, AuditedObject>>,
  ): Promise<string[]> {
    const namespaces = [...new Set([...(await this.namespaces()), ...objects.keys()])];
    // Every namespace's fields in one round trip.
    const read = this.redis.multi();
    for (const ns of namespaces) read.hkeys(this.objectsKey(ns));
    const replies = (await read.exec()) ?? [];
    const touched: string[] = [];
    const multi = this.redis.multi();
    for (const [i, ns] of namespaces.entries()) {
      const hash = this.objectsKey(ns);
      const [err, reply] = replies[i] ?? [];
      if (err) throw err;
      const fields = (reply ?? []) as string[];
      const stale = fields.filter(
        (f) => f.startsWith(`${id}/`) && !objects.get(ns)?.has(f.slice(id.length + 1)),
      );
      if (stale.length > 0) multi.hdel(hash, ...stale);
      const current = objects.get(ns);
      if (current && current.size > 0) {
        multi.hset(
          hash,
          Object.fromEntries([...current].map(([name, o]) => [`${id}/${name}`, JSON.stringify(o)])),
        );
        multi.sadd(`${this.proj}:namespaces`, ns);
      }
      if (stale.length > 0 || (current && current.size > 0)) {
        multi.hincrby(`${this.proj}:changes`, ns, 1);
        touched.push(ns);
      }
    }
    await multi.exec();
    return touched;
  }

  async setResources(resources: readonly WatchedResource[]): Promise<void> {
    const key = `${this.proj}:resources`;
    const multi = this.redis.multi().del(key);
    if (resources.length > 0)
      multi.hset(key, Object.fromEntries(resources.map((r) => [resourceId(r), JSON.stringify(r)])));
    await multi.exec();
  }

  // ------------------------------------------------------------- read by the functions

  async namespaces(): Promise<string[]> {
    return (await this.redis.smembers(`${this.proj}:namespaces`)).sort();
  }

  /** A Namespace's labels (the registry's `namespace` projection); undefined: not seen. */
  async namespaceLabels(namespace: string): Promise<Record<string, string> | undefined> {
    const text = await this.redis.hget(this.namespaceHash, namespace);
    const ns = parse<{ metadata?: { labels?: Record<string, string> } }>(text);
    return ns ? (ns.metadata?.labels ?? {}) : undefined;
  }

  /** Which generation of each Policy the watcher watches every resource for: `<uid>/<generation>`. */
  async coverage(policy: string): Promise<string | undefined> {
    return (await this.redis.hget(`${this.proj}:coverage`, policy)) ?? undefined;
  }

  async setCoverage(covered: ReadonlyMap<string, string>): Promise<void> {
    const key = `${this.proj}:coverage`;
    const multi = this.redis.multi().del(key);
    if (covered.size > 0) multi.hset(key, Object.fromEntries(covered));
    await multi.exec();
  }

  async resources(): Promise<WatchedResource[]> {
    const all = await this.redis.hvals(`${this.proj}:resources`);
    return all.flatMap((text) => parse<WatchedResource>(text) ?? []);
  }

  /** The audited objects of a namespace, by object key, and its change count when read. */
  async objects(namespace: string): Promise<{ objects: Map<string, AuditedObject>; seen: number }> {
    const replies = await this.redis
      .multi()
      .hget(`${this.proj}:changes`, namespace)
      .hgetall(this.objectsKey(namespace))
      .exec();
    const seen = Number(replies?.[0]?.[1] ?? 0);
    const all = (replies?.[1]?.[1] ?? {}) as Record<string, string>;
    const objects = new Map<string, AuditedObject>();
    for (const [key, text] of Object.entries(all)) {
      const o = parse<AuditedObject>(text);
      if (o) objects.set(key, o);
    }
    return { objects, seen };
  }

  /** Every namespace's change count. */
  async changes(): Promise<Map<string, number>> {
    const all = await this.redis.hgetall(`${this.proj}:changes`);
    return new Map(Object.entries(all).map(([ns, n]) => [ns, Number(n)]));
  }

  /** The results of every Policy in a namespace; undefined: never written (or Redis lost them). */
  async results(namespace: string): Promise<Map<string, NamespaceResults> | undefined> {
    const all = await this.redis.hgetall(`${this.own}:results:${namespace}`);
    if (all[MARKER] === undefined) return undefined;
    const out = new Map<string, NamespaceResults>();
    for (const [policy, text] of Object.entries(all)) {
      if (policy === MARKER) continue;
      const r = parse<NamespaceResults>(text);
      if (r) out.set(policy, r);
    }
    return out;
  }

  /**
   * Records a run's results: `changed` Policies rewritten, `removed` ones dropped (with their
   * summaries of the namespace), the summaries of `changed` filed for audit-summary.
   */
  async saveResults(
    namespace: string,
    changed: ReadonlyMap<string, NamespaceResults>,
    removed: readonly string[],
  ): Promise<void> {
    const key = `${this.own}:results:${namespace}`;
    const multi = this.redis.multi().hset(key, MARKER, '1');
    if (changed.size > 0)
      multi.hset(key, Object.fromEntries([...changed].map(([p, r]) => [p, JSON.stringify(r)])));
    if (removed.length > 0) multi.hdel(key, ...removed);
    for (const [policy, r] of changed)
      multi.hset(`${this.own}:summary:${policy}`, namespace, JSON.stringify(r.summary));
    for (const policy of removed) multi.hdel(`${this.own}:summary:${policy}`, namespace);
    await multi.exec();
    // A namespace left with nothing to judge leaves the set (its summaries now count nothing).
    await leaveIfEmpty.run(
      this.redis,
      [this.objectsKey(namespace), `${this.proj}:namespaces`],
      [namespace],
    );
  }

  /** A Policy's summaries, by namespace. */
  async summaries(policy: string): Promise<Map<string, NamespaceSummary>> {
    const all = await this.redis.hgetall(`${this.own}:summary:${policy}`);
    const out = new Map<string, NamespaceSummary>();
    for (const [ns, text] of Object.entries(all)) {
      const s = parse<NamespaceSummary>(text);
      if (s) out.set(ns, s);
    }
    return out;
  }

  async forgetPolicy(policy: string): Promise<void> {
    await this.redis.del(`${this.own}:summary:${policy}`);
  }
}
