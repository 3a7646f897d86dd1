// The Redis store of the watched objects' compact projections (project.ts): written by the
// watcher, read by the workers, so that a job reads a few Redis round trips instead of listing
// the cluster.
//
// Layout (one hash per kind, field = object name, value = compact JSON):
//   <prefix>:proj:policy, :policyserver, :deployment, :replicaset, :webhook
//   <prefix>:proj:pods:<policy server>   the server's pods, by pod name; each says whether its
//                                        report is absent, valid or invalid (with the reason)
//   <prefix>:proj:report:<server>:<pod>  a valid report's entries: policy name -> entry JSON.
//                                        The watcher reads a report once per pod event, so a
//                                        policy run reads one entry per pod, not every report
//   <prefix>:proj:secret                 Secrets of rollcall's namespace: name, resourceVersion
//                                        and labels only (never data: private keys stay out)
//   <prefix>:proj:server-policies:<server>  set of the names of the server's Policies (the
//                                        `fan-out/<server>` jobs read it)
//   <prefix>:proj:synced                 set after a full write; a Redis that lost its data
//                                        lacks it, and workers then wait instead of acting
//                                        on an empty picture.
//   <prefix>:proj:generation             Sentinel and Cluster only: the watcher's write count,
//                                        one more after each event's writes; a new primary
//                                        with a lower count lost some of them. Never deleted.
// On a Cluster the prefix is a hash tag (`{rollcall}`, keyPrefix): every key of rollcall is in
// one slot, so each MULTI stays legal.
import { keyPrefix, keysMatching, type RedisClient } from '../../lib/redis/client.ts';
import { RedisScript } from '../../lib/redis/script.ts';
import { webhookConfigurationName } from '../../api/constants.ts';
import type { Deployment, ExistingWebhook, KubeObject, Pod, ReplicaSet } from '../../api/kube.ts';
import type { PolicyReport, ReportEntry } from '../../api/report.ts';
import {
  policySchema,
  policyServerSchema,
  type Policy,
  type PolicyServer,
} from '../../api/v1alpha1.ts';
import type { ProjectedKind } from '../registry.ts';
import { serverOf, type ProjectedPod } from './project.ts';

/** Everything the policy and webhook functions need about one Policy. */
export interface PolicyView {
  policy: Policy | undefined;
  /** Why the stored Policy could not be read, if it could not. */
  invalid?: string;
  policyServer: PolicyServer | undefined;
  deployment: Deployment | undefined;
  replicaSets: ReplicaSet[];
  pods: Pod[];
  /** What each pod reports about this Policy, by pod name (the policy core's `reports`). */
  reports: ReadonlyMap<string, PolicyReport>;
  webhook: ExistingWebhook | undefined;
}

/** A pod as its server's pods hash holds it: a valid report's entries are in its report hash. */
type StoredPod = Pod & {
  report: { kind: 'absent' } | { kind: 'valid' } | { kind: 'invalid'; reason: string };
};

export interface PolicyServerView {
  policyServer: PolicyServer | undefined;
  invalid?: string;
  deployment: Deployment | undefined;
}

type Transaction = ReturnType<RedisClient['multi']>;

/**
 * What `policyView` reads, as Redis returns it: the Policy and its webhook, then (when the
 * stored Policy names a server) the PolicyServer, its Deployment, every ReplicaSet, the
 * server's pods and, in the pods' order, each pod's entry about the Policy; by name.
 */
type PolicyViewReply = [
  policy: string | null,
  webhook: string | null,
  server?: string | null,
  deployment?: string | null,
  replicaSets?: string[],
  pods?: string[],
  entries?: (string | null)[],
];

// One round trip for what every run of the policy and webhook functions reads first (three
// MULTIs before: their commands and replies were most of the read's CPU). KEYS[1] is the
// synced marker: it routes the call on a Cluster, where every projection shares its slot.
// ARGV: the projections' base, the Policy, its webhook configuration, the Deployment names'
// prefix. The server comes from the stored Policy (a Policy that does not decode returns
// alone: the caller reports it invalid). Pods and ReplicaSets come by name, as the apiserver
// lists them (a hash's own order changes with Redis' seed, and a core names the first pod it
// waits for). A pod whose report is not valid has no report hash, so its entry reads nil.
const readPolicyView = new RedisScript(`
local base, name = ARGV[1], ARGV[2]
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local policy = redis.call('HGET', base .. ':policy', name)
local webhook = redis.call('HGET', base .. ':webhook', ARGV[3])
local ok, decoded = pcall(cjson.decode, policy or 'null')
local spec = ok and type(decoded) == 'table' and decoded.spec
local server = type(spec) == 'table' and spec.policyServer
if type(server) ~= 'string' then return {policy, webhook} end
local function sorted(hash)
  local fields = redis.call('HKEYS', hash)
  table.sort(fields)
  local values = {}
  for i, field in ipairs(fields) do values[i] = redis.call('HGET', hash, field) end
  return fields, values
end
local podNames, pods = sorted(base .. ':pods:' .. server)
local entries = {}
for i, pod in ipairs(podNames) do
  entries[i] = redis.call('HGET', base .. ':report:' .. server .. ':' .. pod, name)
end
local _, replicaSets = sorted(base .. ':replicaset')
return {
  policy, webhook,
  redis.call('HGET', base .. ':policyserver', server),
  redis.call('HGET', base .. ':deployment', ARGV[4] .. server),
  replicaSets,
  pods, entries,
}
`);

// A status rollcall wrote, in place of the projection it was computed from: only while that
// is still the one stored (its resourceVersion), so that no newer event is overwritten.
const putWritten = new RedisScript(`
local ok, stored = pcall(cjson.decode, redis.call('HGET', KEYS[1], ARGV[1]) or 'null')
if not ok or type(stored) ~= 'table' or type(stored.metadata) ~= 'table' then return 0 end
if stored.metadata.resourceVersion ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
`);

export class ProjectionStore {
  readonly redis: RedisClient;
  private readonly base: string;

  constructor(redis: RedisClient, prefix = 'rollcall') {
    this.redis = redis;
    this.base = `${keyPrefix(redis, prefix)}:proj`;
  }

  /** The synced marker's key (its slot picks the Cluster node that holds every projection). */
  get syncedKey(): string {
    return `${this.base}:synced`;
  }

  private get generationKey(): string {
    return `${this.base}:generation`;
  }

  private hash(kind: ProjectedKind, server?: string): string {
    return kind === 'pod' ? `${this.base}:pods:${server ?? ''}` : `${this.base}:${kind}`;
  }

  private serverPolicies(server: string): string {
    return `${this.base}:server-policies:${server}`;
  }

  /** A pod's report entries, by policy name. */
  private reportHash(server: string | undefined, pod: string): string {
    return `${this.base}:report:${server ?? ''}:${pod}`;
  }

  /** Queues the writes of one projection (`compact`'s output) on `tx`. */
  private write(tx: Transaction, kind: ProjectedKind, obj: KubeObject, name: string): void {
    const server = serverOf(kind, obj);
    if (kind !== 'pod') {
      tx.hset(this.hash(kind, server), name, JSON.stringify(obj));
      if (kind === 'policy' && server) tx.sadd(this.serverPolicies(server), name);
      return;
    }
    // A pod's report is rewritten whole: the watcher parses it anyway, and a whole rewrite
    // never depends on knowing what Redis held before.
    const { report, ...pod } = obj as ProjectedPod;
    const stored: StoredPod = {
      ...pod,
      report: report.kind === 'valid' ? { kind: 'valid' } : report,
    };
    tx.hset(this.hash(kind, server), name, JSON.stringify(stored));
    const entries = this.reportHash(server, name);
    tx.del(entries);
    if (report.kind !== 'valid') return;
    const fields = Object.entries(report.report).flatMap(([policy, entry]) => [
      policy,
      JSON.stringify(entry),
    ]);
    if (fields.length > 0) tx.hset(entries, ...fields);
  }

  /** Queues the removal of what `write` wrote for an object filed under `server`. */
  private unwrite(
    tx: Transaction,
    kind: ProjectedKind,
    name: string,
    server: string | undefined,
  ): void {
    tx.hdel(this.hash(kind, server), name);
    if (kind === 'policy' && server) tx.srem(this.serverPolicies(server), name);
    if (kind === 'pod') tx.del(this.reportHash(server, name));
  }

  /** Queues the removal of `old`'s filing when it was under another server than `obj`. */
  private unfileMoved(
    tx: Transaction,
    kind: ProjectedKind,
    name: string,
    obj: KubeObject,
    old: KubeObject | undefined,
  ): void {
    const oldServer = old ? serverOf(kind, old) : undefined;
    if (old && oldServer !== serverOf(kind, obj)) this.unwrite(tx, kind, name, oldServer);
  }

  /**
   * Writes an object's projection (`compact`'s output) in one MULTI: a Policy also joins its
   * server's set, a pod's report entries go to its report hash. `old`: the version before,
   * whose filing under another server (a pod relabelled, a Policy moved) is undone.
   */
  async put(kind: ProjectedKind, obj: KubeObject, old?: KubeObject): Promise<void> {
    const name = obj.metadata?.name;
    if (!name) return;
    const tx = this.redis.multi();
    this.unfileMoved(tx, kind, name, obj, old);
    this.write(tx, kind, obj, name);
    await tx.exec();
  }

  /**
   * Stores a status rollcall wrote (`compact`'s output of the apiserver's answer) if the
   * projection still holds the version it was computed from (`readVersion`): the next run
   * reads it without waiting for its watch event (which writes the same), and cannot take the
   * old status for current. Such a run would compute the old status again, find it equal to
   * the stored one and write nothing, leaving the written status in place: what a pod that
   * flapped, or a Redis failover between a write and its event, left behind.
   * True when stored.
   */
  async putWritten(
    kind: 'policy' | 'policyserver',
    written: KubeObject,
    readVersion: string,
  ): Promise<boolean> {
    const name = written.metadata?.name;
    if (!name) return false;
    const stored = await putWritten.run(
      this.redis,
      [this.hash(kind, undefined)],
      [name, readVersion, JSON.stringify(written)],
    );
    return stored === 1;
  }

  /** Removes an object's projection, from the server it was filed under (and `old`'s). */
  async remove(kind: ProjectedKind, obj: KubeObject, old?: KubeObject): Promise<void> {
    const name = obj.metadata?.name;
    if (!name) return;
    const tx = this.redis.multi();
    this.unwrite(tx, kind, name, serverOf(kind, obj));
    this.unfileMoved(tx, kind, name, obj, old);
    await tx.exec();
  }

  /** The names of a server's Policies; undefined while the store is not synced. */
  async policiesOfServer(server: string): Promise<string[] | undefined> {
    const [synced, names] = (await this.redis
      .multi()
      .exists(`${this.base}:synced`)
      .smembers(this.serverPolicies(server))
      .exec())!.map(([, v]) => v) as [number, string[]];
    return synced ? names : undefined;
  }

  /**
   * Replaces every projection with `objects` (`compact`'s output) in one MULTI, then marks
   * the store synced. Called after the watcher's informers synced, and again whenever Redis
   * comes back empty.
   */
  async replaceAll(objects: Partial<Record<ProjectedKind, readonly KubeObject[]>>): Promise<void> {
    // The generation survives rebuilds: it only ever grows, so a primary that missed a rebuild
    // still reads lower than the watcher's count.
    const old = (await keysMatching(this.redis, `${this.base}:*`)).filter(
      (k) => k !== this.generationKey,
    );
    const tx = this.redis.multi();
    if (old.length) tx.del(...old);
    for (const [kind, list] of Object.entries(objects) as [ProjectedKind, KubeObject[]][]) {
      for (const obj of list) {
        const name = obj.metadata?.name;
        if (name) this.write(tx, kind, obj, name);
      }
    }
    tx.set(this.syncedKey, new Date().toISOString());
    await tx.exec();
  }

  /** Counts one more write of the watcher; returns the new count. */
  async countWrite(): Promise<number> {
    return this.redis.incr(this.generationKey);
  }

  /** The synced marker and the write count, read together. */
  async writeState(): Promise<{ synced: boolean; generation: number }> {
    const [synced, generation] = (await this.redis
      .multi()
      .exists(this.syncedKey)
      .get(this.generationKey)
      .exec())!.map(([, v]) => v) as [number, string | null];
    return { synced: synced === 1, generation: Number(generation ?? 0) };
  }

  async isSynced(): Promise<boolean> {
    return (await this.redis.exists(this.syncedKey)) === 1;
  }

  /**
   * Reads what a Policy's functions need in one round trip (`readPolicyView`); `undefined`
   * while the store is not synced. The server's Deployment is `<deploymentPrefix><server>`.
   */
  async policyView(name: string, deploymentPrefix: string): Promise<PolicyView | undefined> {
    const read = (await readPolicyView.run(
      this.redis,
      [this.syncedKey],
      [this.base, name, webhookConfigurationName(name), deploymentPrefix],
    )) as PolicyViewReply | null;
    if (!read) return undefined;
    const [rawPolicy, rawWebhook, rawServer, rawDeployment, rawReplicaSets, rawPods, entries] =
      read;
    const webhook = rawWebhook ? (JSON.parse(rawWebhook) as ExistingWebhook) : undefined;
    const parsed = parse(policySchema, rawPolicy);
    const base = {
      webhook,
      policyServer: undefined,
      deployment: undefined,
      replicaSets: [],
      pods: [],
      reports: new Map(),
    };
    if (!parsed.ok) return { ...base, policy: undefined, invalid: parsed.error };
    if (!parsed.value) return { ...base, policy: undefined };
    const serverParsed = parse(policyServerSchema, rawServer ?? null);
    const stored = (rawPods ?? []).map((p) => JSON.parse(p) as StoredPod);
    return {
      policy: parsed.value,
      webhook,
      policyServer: serverParsed.ok ? serverParsed.value : undefined,
      deployment: rawDeployment ? (JSON.parse(rawDeployment) as Deployment) : undefined,
      replicaSets: (rawReplicaSets ?? []).map((r) => JSON.parse(r) as ReplicaSet),
      pods: stored.map(({ report: _, ...pod }) => pod),
      reports: new Map(
        stored.map(({ metadata, report }, i): [string, PolicyReport] => {
          if (report.kind !== 'valid') return [metadata?.name ?? '', report];
          const entry = entries?.[i];
          const parsedEntry = entry ? (JSON.parse(entry) as ReportEntry) : undefined;
          return [metadata?.name ?? '', { kind: 'valid', entry: parsedEntry }];
        }),
      ),
    };
  }

  /** The entries of each pod whose report is valid, in one round trip; by pod. */
  private async validReports(
    server: string,
    pods: readonly StoredPod[],
  ): Promise<Map<string, Record<string, string>>> {
    const valid = pods.filter((p) => p.report.kind === 'valid').map((p) => p.metadata?.name ?? '');
    if (valid.length === 0) return new Map();
    const tx = this.redis.multi();
    for (const pod of valid) tx.hgetall(this.reportHash(server, pod));
    const results = (await tx.exec())!;
    return new Map(valid.map((pod, i) => [pod, results[i]![1] as Record<string, string>]));
  }

  async policyServerView(
    name: string,
    deploymentName: string,
  ): Promise<PolicyServerView | undefined> {
    const [synced, rawServer, rawDeployment] = (await this.redis
      .multi()
      .exists(this.syncedKey)
      .hget(this.hash('policyserver'), name)
      .hget(this.hash('deployment'), deploymentName)
      .exec())!.map(([, v]) => v) as [number, string | null, string | null];
    if (!synced) return undefined;
    const parsed = parse(policyServerSchema, rawServer);
    return {
      policyServer: parsed.ok ? parsed.value : undefined,
      ...(parsed.ok ? {} : { invalid: parsed.error }),
      deployment: rawDeployment ? (JSON.parse(rawDeployment) as Deployment) : undefined,
    };
  }

  /** Every webhook configuration rollcall watches (its own), as projected. */
  async webhooks(): Promise<ExistingWebhook[]> {
    return (await this.redis.hvals(this.hash('webhook'))).map(
      (v) => JSON.parse(v) as ExistingWebhook,
    );
  }

  /** One stored Policy or PolicyServer, undecoded; undefined: none by that name. */
  async one(kind: 'policy' | 'policyserver', name: string): Promise<unknown> {
    const text = await this.redis.hget(this.hash(kind), name);
    return text === null ? undefined : (JSON.parse(text) as unknown);
  }

  /** Names of the Policies and PolicyServers in the store, for the status page. */
  async all(kind: 'policy' | 'policyserver'): Promise<unknown[]> {
    return (await this.redis.hvals(this.hash(kind))).map((v) => JSON.parse(v) as unknown);
  }

  /** A server's pods with their whole reports (the status page's matrix). */
  async podsOf(server: string): Promise<ProjectedPod[]> {
    const stored = (await this.redis.hvals(this.hash('pod', server))).map(
      (v) => JSON.parse(v) as StoredPod,
    );
    const reports = await this.validReports(server, stored);
    return stored.map(({ report, ...pod }): ProjectedPod => {
      if (report.kind !== 'valid') return { ...pod, report };
      const entries = Object.entries(reports.get(pod.metadata?.name ?? '') ?? {});
      return {
        ...pod,
        report: {
          kind: 'valid',
          report: Object.fromEntries(entries.map(([p, e]) => [p, JSON.parse(e) as ReportEntry])),
        },
      };
    });
  }
}

type Parsed<T> = { ok: true; value: T | undefined } | { ok: false; error: string };

function parse<T>(
  schema: {
    safeParse(
      v: unknown,
    ):
      | { success: true; data: T }
      | { success: false; error: { issues: { path: PropertyKey[]; message: string }[] } };
  },
  raw: string | null,
): Parsed<T> {
  if (raw === null) return { ok: true, value: undefined };
  const result = schema.safeParse(JSON.parse(raw));
  if (result.success) return { ok: true, value: result.data };
  const issue = result.error.issues[0];
  const path = issue?.path.map(String).join('.');
  return {
    ok: false,
    error: issue ? (path ? `${path}: ${issue.message}` : issue.message) : 'invalid object',
  };
}
