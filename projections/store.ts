// Compact projections of the watched objects, kept in Redis by the watcher and read by the
// workers, so that a job reads one Redis round trip instead of listing the cluster.
//
// Layout (one hash per kind, field = object name, value = compact JSON):
//   <prefix>:proj:policy, :policyserver, :deployment, :replicaset, :webhook
//   <prefix>:proj:pods:<policy server>   the server's pods, by pod name
//   <prefix>:proj:synced                 set after a full write; a Redis that lost its data
//                                        lacks it, and workers then wait instead of acting
//                                        on an empty picture.
import type { Redis } from 'ioredis';
import { POLICY_SERVER_LABEL, REPORT_ANNOTATION } from '../api/constants.ts';
import type { Deployment, ObjectMeta, Pod, ReplicaSet } from '../api/kube.ts';
import {
  policySchema,
  policyServerSchema,
  type Policy,
  type PolicyServer,
} from '../api/v1alpha1.ts';
import type { ExistingWebhook } from '../functions/webhook-core.ts';

export type ProjectedKind =
  'policy' | 'policyserver' | 'deployment' | 'replicaset' | 'webhook' | 'pod';

/** Everything the policy and webhook functions need about one Policy. */
export interface PolicyView {
  policy: Policy | undefined;
  /** Why the stored Policy could not be read, if it could not. */
  invalid?: string;
  policyServer: PolicyServer | undefined;
  deployment: Deployment | undefined;
  replicaSets: ReplicaSet[];
  pods: Pod[];
  webhook: ExistingWebhook | undefined;
}

export interface PolicyServerView {
  policyServer: PolicyServer | undefined;
  invalid?: string;
  deployment: Deployment | undefined;
}

interface Meta {
  name?: string;
  namespace?: string;
  uid?: string;
  generation?: number;
  resourceVersion?: string;
  creationTimestamp?: unknown;
  deletionTimestamp?: unknown;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  ownerReferences?: unknown[];
}

function meta(m: Meta | undefined, annotations?: string[]): Meta {
  const kept =
    annotations && m?.annotations
      ? Object.fromEntries(
          annotations.flatMap((a) =>
            m.annotations?.[a] !== undefined ? [[a, m.annotations[a]]] : [],
          ),
        )
      : m?.annotations;
  return {
    name: m?.name,
    namespace: m?.namespace,
    uid: m?.uid,
    generation: m?.generation,
    resourceVersion: m?.resourceVersion,
    creationTimestamp: m?.creationTimestamp,
    deletionTimestamp: m?.deletionTimestamp ?? undefined,
    labels: m?.labels,
    annotations: kept,
    ownerReferences: m?.ownerReferences,
  };
}

type AnyObject = {
  metadata?: Meta;
  spec?: Record<string, unknown>;
  status?: Record<string, unknown>;
  webhooks?: unknown;
} & Record<string, unknown>;

/** apiVersion and kind per projection: list responses leave them out of their items. */
const typeMeta: Record<ProjectedKind, { apiVersion: string; kind: string }> = {
  policy: { apiVersion: 'rollcall.dev/v1alpha1', kind: 'Policy' },
  policyserver: { apiVersion: 'rollcall.dev/v1alpha1', kind: 'PolicyServer' },
  deployment: { apiVersion: 'apps/v1', kind: 'Deployment' },
  replicaset: { apiVersion: 'apps/v1', kind: 'ReplicaSet' },
  pod: { apiVersion: 'v1', kind: 'Pod' },
  webhook: {
    apiVersion: 'admissionregistration.k8s.io/v1',
    kind: 'ValidatingWebhookConfiguration',
  },
};

/** Keeps only what the cores read: the projections stay small (a pod is a few hundred bytes). */
export function compact(kind: ProjectedKind, obj: AnyObject): unknown {
  return { ...typeMeta[kind], ...compactBody(kind, obj) };
}

function compactBody(kind: ProjectedKind, obj: AnyObject): Record<string, unknown> {
  switch (kind) {
    case 'policy':
    case 'policyserver':
      return { metadata: meta(obj.metadata), spec: obj.spec, status: obj.status };
    case 'deployment': {
      const spec = obj.spec as Deployment['spec'];
      return {
        metadata: meta(obj.metadata, ['rollcall.dev/applied-hash']),
        spec: {
          replicas: spec?.replicas,
          progressDeadlineSeconds: spec?.progressDeadlineSeconds,
          template: {
            spec: {
              containers: spec?.template?.spec?.containers?.map((c) => ({
                name: c.name,
                image: c.image,
              })),
            },
          },
        },
        status: obj.status,
      };
    }
    case 'replicaset':
      return { metadata: meta(obj.metadata, []) };
    case 'pod': {
      const status = obj.status as Pod['status'];
      return {
        metadata: meta(obj.metadata, [REPORT_ANNOTATION]),
        status: {
          phase: status?.phase,
          conditions: status?.conditions?.filter((c) => c.type === 'Ready'),
        },
      };
    }
    case 'webhook':
      return { metadata: meta(obj.metadata), webhooks: obj.webhooks };
  }
}

/** The projection hash a pod belongs to: its policy server's, by label. */
export function podServer(pod: { metadata?: ObjectMeta | Meta }): string | undefined {
  return pod.metadata?.labels?.[POLICY_SERVER_LABEL];
}

export class ProjectionStore {
  readonly redis: Redis;
  private readonly base: string;

  constructor(redis: Redis, prefix = 'rollcall') {
    this.redis = redis;
    this.base = `${prefix}:proj`;
  }

  private hash(kind: ProjectedKind, server?: string): string {
    return kind === 'pod' ? `${this.base}:pods:${server ?? ''}` : `${this.base}:${kind}`;
  }

  async put(kind: ProjectedKind, obj: AnyObject): Promise<void> {
    const name = obj.metadata?.name;
    if (!name) return;
    await this.redis.hset(
      this.hash(kind, kind === 'pod' ? podServer(obj) : undefined),
      name,
      JSON.stringify(compact(kind, obj)),
    );
  }

  async remove(kind: ProjectedKind, name: string, server?: string): Promise<void> {
    await this.redis.hdel(this.hash(kind, server), name);
  }

  /**
   * Replaces every projection with `objects` in one MULTI, then marks the store synced.
   * Called after the watcher's informers synced, and again whenever Redis comes back empty.
   */
  async replaceAll(objects: Partial<Record<ProjectedKind, AnyObject[]>>): Promise<void> {
    const old = await this.redis.keys(`${this.base}:*`);
    const tx = this.redis.multi();
    if (old.length) tx.del(...old);
    for (const [kind, list] of Object.entries(objects) as [ProjectedKind, AnyObject[]][]) {
      for (const obj of list) {
        const name = obj.metadata?.name;
        if (name)
          tx.hset(
            this.hash(kind, kind === 'pod' ? podServer(obj) : undefined),
            name,
            JSON.stringify(compact(kind, obj)),
          );
      }
    }
    tx.set(`${this.base}:synced`, new Date().toISOString());
    await tx.exec();
  }

  async isSynced(): Promise<boolean> {
    return (await this.redis.exists(`${this.base}:synced`)) === 1;
  }

  /** Reads what a Policy's functions need in one round trip; `undefined` while the store is not synced. */
  async policyView(
    name: string,
    deploymentName: (server: string) => string,
  ): Promise<PolicyView | undefined> {
    const [synced, rawPolicy, rawWebhook] = (await this.redis
      .multi()
      .exists(`${this.base}:synced`)
      .hget(this.hash('policy'), name)
      .hget(this.hash('webhook'), `rollcall-${name}`)
      .exec())!.map(([, v]) => v) as [number, string | null, string | null];
    if (!synced) return undefined;
    const webhook = rawWebhook ? (JSON.parse(rawWebhook) as ExistingWebhook) : undefined;
    const parsed = parse(policySchema, rawPolicy);
    const base = {
      webhook,
      policyServer: undefined,
      deployment: undefined,
      replicaSets: [],
      pods: [],
    };
    if (!parsed.ok) return { ...base, policy: undefined, invalid: parsed.error };
    if (!parsed.value) return { ...base, policy: undefined };
    const policy = parsed.value;
    const server = policy.spec.policyServer;
    const [rawServer, rawDeployment, rawReplicaSets, rawPods] = (await this.redis
      .multi()
      .hget(this.hash('policyserver'), server)
      .hget(this.hash('deployment'), deploymentName(server))
      .hvals(this.hash('replicaset'))
      .hvals(this.hash('pod', server))
      .exec())!.map(([, v]) => v) as [string | null, string | null, string[], string[]];
    const serverParsed = parse(policyServerSchema, rawServer);
    return {
      policy,
      webhook,
      policyServer: serverParsed.ok ? serverParsed.value : undefined,
      deployment: rawDeployment ? (JSON.parse(rawDeployment) as Deployment) : undefined,
      replicaSets: rawReplicaSets.map((r) => JSON.parse(r) as ReplicaSet),
      pods: rawPods.map((p) => JSON.parse(p) as Pod),
    };
  }

  async policyServerView(
    name: string,
    deploymentName: string,
  ): Promise<PolicyServerView | undefined> {
    const [synced, rawServer, rawDeployment] = (await this.redis
      .multi()
      .exists(`${this.base}:synced`)
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

  /** Names of the Policies and PolicyServers in the store, for the status page. */
  async all(kind: 'policy' | 'policyserver'): Promise<unknown[]> {
    return (await this.redis.hvals(this.hash(kind))).map((v) => JSON.parse(v) as unknown);
  }

  async podsOf(server: string): Promise<Pod[]> {
    return (await this.redis.hvals(this.hash('pod', server))).map((v) => JSON.parse(v) as Pod);
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
  return {
    ok: false,
    error: issue ? `${issue.path.map(String).join('.')}: ${issue.message}` : 'invalid object',
  };
}
