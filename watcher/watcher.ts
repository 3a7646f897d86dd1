// The watcher: while it holds the leader Lease, reflectors watch the objects rollcall cares
// about; each change updates its compact projection in Redis, then enqueues the keys the
// functions want for it. It never reconciles anything itself.
import type { KubeConfig, KubernetesObject } from '@kubernetes/client-node';
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { Gauge, Histogram, type Registry } from 'prom-client';
import { MANAGED_BY, MANAGED_BY_LABEL, POLICY_SERVER_LABEL } from '../api/constants.ts';
import type {
  ClusterIndex,
  ReconcileFunction,
  WatchedKind,
  WatchEvent,
  WatchedObject,
} from '../functions/types.ts';
import { podServer, ProjectionStore, type ProjectedKind } from '../projections/store.ts';
import type { WorkQueue } from '../queue/index.ts';
import { LeaderElector } from './leader.ts';
import { reflectorMetrics } from './metrics.ts';
import { Reflector } from './reflector.ts';

export interface WatcherOptions {
  kc: KubeConfig;
  redis: Redis;
  queue: WorkQueue;
  functions: readonly ReconcileFunction[];
  /** rollcall's namespace: policy-server Deployments, ReplicaSets and pods live here. */
  namespace: string;
  logger: Logger;
  /** Redis key prefix of the projections. Default `rollcall`. */
  prefix?: string;
  /** This replica's name in the leader election. */
  identity: string;
  /** Lease name; every watcher replica of one installation uses the same. Default `rollcall-watcher`. */
  leaseName?: string;
  leaseDurationSeconds?: number;
  /** Every key is enqueued again this often, to heal anything missed. Default 5 min. */
  resyncMs?: number;
  /** How often to check that Redis still holds the projections. Default 2 s. */
  redisCheckMs?: number;
  /** A watch silent this long (no event, no bookmark) is restarted. Default 90 s. */
  staleAfterMs?: number;
  metrics?: Registry;
}

interface Watched {
  kind: WatchedKind;
  projected: ProjectedKind;
  path: string;
  labelSelector?: string;
}

export class Watcher {
  private readonly options: WatcherOptions;
  private readonly store: ProjectionStore;
  private readonly elector: LeaderElector;
  private reflectors = new Map<WatchedKind, Reflector<KubernetesObject>>();
  private timers: NodeJS.Timeout[] = [];
  /** Policy names by the PolicyServer they name, for mapping server-side events to keys. */
  private readonly policiesByServer = new Map<string, Set<string>>();
  private live = false;
  /** A projection write or enqueue failed (Redis away): rebuild everything once it answers. */
  private lostWrites = false;
  /**
   * Projection writes and rebuilds run one at a time: a rebuild's snapshot must never
   * overwrite an event that was written after the snapshot was taken.
   */
  private writes: Promise<unknown> = Promise.resolve();
  /** Policies whose new generation has no status yet: when the watcher saw that generation. */
  private readonly awaitingStatus = new Map<string, { generation: number; since: number }>();
  private readonly convergence: Histogram | undefined;

  constructor(options: WatcherOptions) {
    this.options = options;
    this.store = new ProjectionStore(options.redis, options.prefix);
    this.elector = new LeaderElector({
      kc: options.kc,
      namespace: options.namespace,
      name: options.leaseName ?? 'rollcall-watcher',
      identity: options.identity,
      leaseDurationSeconds: options.leaseDurationSeconds ?? 15,
      logger: options.logger,
      onStartedLeading: () => this.lead(),
      onStoppedLeading: () => this.standBy(),
    });
    const registers = options.metrics ? [options.metrics] : undefined;
    if (registers) {
      const isLeader = () => this.isLeader();
      new Gauge({
        name: 'rollcall_watcher_leader',
        help: '1 while this watcher holds the leader Lease, else 0',
        registers,
        collect() {
          this.set(isLeader() ? 1 : 0);
        },
      });
      this.convergence = new Histogram({
        name: 'rollcall_policy_status_latency_seconds',
        help: "From the watcher seeing a Policy's new generation to seeing a status with that observedGeneration",
        buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120],
        registers,
      });
    }
  }

  start(): void {
    this.elector.start();
  }

  async stop(): Promise<void> {
    await this.elector.stop();
    await this.standBy();
  }

  isLeader(): boolean {
    return this.elector.isLeader();
  }

  /** Why this watcher cannot tell who leads, if it cannot (see LeaderElector.problem). */
  leaseProblem(): string | undefined {
    return this.elector.problem();
  }

  /** Ready: a standby always; a leader once every informer has synced and the projections are written. */
  isReady(): boolean {
    return !this.isLeader() || this.live;
  }

  private watched(): Watched[] {
    const ns = this.options.namespace;
    const servers = POLICY_SERVER_LABEL;
    return [
      {
        kind: 'PolicyServer',
        projected: 'policyserver',
        path: '/apis/rollcall.dev/v1alpha1/policyservers',
      },
      { kind: 'Policy', projected: 'policy', path: '/apis/rollcall.dev/v1alpha1/policies' },
      {
        kind: 'Deployment',
        projected: 'deployment',
        path: `/apis/apps/v1/namespaces/${ns}/deployments`,
        labelSelector: servers,
      },
      {
        kind: 'ReplicaSet',
        projected: 'replicaset',
        path: `/apis/apps/v1/namespaces/${ns}/replicasets`,
        labelSelector: servers,
      },
      {
        kind: 'Pod',
        projected: 'pod',
        path: `/api/v1/namespaces/${ns}/pods`,
        labelSelector: servers,
      },
      {
        kind: 'ValidatingWebhookConfiguration',
        projected: 'webhook',
        path: '/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations',
        labelSelector: `${MANAGED_BY_LABEL}=${MANAGED_BY}`,
      },
    ];
  }

  private lead(): void {
    const { logger } = this.options;
    logger.info('leading: starting informers');
    for (const w of this.watched()) {
      const reflector: Reflector<KubernetesObject> = new Reflector<KubernetesObject>({
        kc: this.options.kc,
        path: w.path,
        labelSelector: w.labelSelector,
        staleAfterMs: this.options.staleAfterMs,
        resyncMs: 0, // one resync timer for all kinds, below
        logger,
        metrics: this.options.metrics
          ? reflectorMetrics(this.options.metrics, w.projected)
          : undefined,
        onAdd: (obj) => this.changed(w, 'added', obj),
        onUpdate: (old, obj) => this.changed(w, 'modified', obj, old),
        onDelete: (obj) => this.changed(w, 'deleted', obj),
        onSynced: () => this.maybeGoLive(),
      });
      this.reflectors.set(w.kind, reflector);
      reflector.start();
    }
    const every = (ms: number, fn: () => Promise<void>) =>
      this.timers.push(
        setInterval(
          () => fn().catch((err: unknown) => logger.warn({ err }, 'periodic watcher task failed')),
          ms,
        ),
      );
    // A resync also rewrites the projections, healing any write that went astray.
    every(this.options.resyncMs ?? 300_000, () => this.rebuild('resync'));
    every(this.options.redisCheckMs ?? 2000, () => this.checkRedis());
  }

  private async standBy(): Promise<void> {
    this.live = false;
    this.awaitingStatus.clear();
    for (const t of this.timers) clearInterval(t);
    this.timers = [];
    const reflectors = [...this.reflectors.values()];
    this.reflectors.clear();
    await Promise.all(reflectors.map((r) => r.stop()));
  }

  /** Once every reflector has listed: write all projections in one go, then enqueue every key. */
  private async maybeGoLive(): Promise<void> {
    if (this.live || [...this.reflectors.values()].some((r) => !r.hasSynced())) return;
    await this.rebuild('initial sync', true);
  }

  /** Runs fn after every projection write or rebuild queued before it. */
  private serialized<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.writes.then(fn, fn);
    this.writes = run.catch(() => {});
    return run;
  }

  /** Rewrites every projection from the informers' stores and enqueues every key. */
  private rebuild(why: string, goLive = false): Promise<void> {
    return this.serialized(async () => {
      if (goLive && this.live) return; // another reflector's sync got here first
      // Stepped down meanwhile: empty stores must never overwrite the new leader's projections.
      if (this.reflectors.size === 0) return;
      const objects: Partial<Record<ProjectedKind, KubernetesObject[]>> = {};
      for (const w of this.watched())
        objects[w.projected] = this.reflectors.get(w.kind)?.list() ?? [];
      this.policiesByServer.clear();
      for (const p of objects.policy ?? []) this.index(p, undefined);
      await this.store.replaceAll(objects as never);
      // Live from inside the write order: an event that arrived after the snapshot is queued
      // behind this section and must be written, not skipped as "before live".
      if (goLive) this.live = true;
      this.options.logger.info(
        { why, objects: Object.values(objects).reduce((n, l) => n + l.length, 0) },
        'projections written',
      );
      await this.enqueueAll(why);
    });
  }

  /** A Redis that restarted empty has lost the projections and the queue: rebuild both. */
  private async checkRedis(): Promise<void> {
    // The initial rebuild failed (Redis was away just then): try again, or the watcher would
    // hold the lease without ever going live.
    if (!this.live) return this.maybeGoLive();
    if (this.lostWrites) {
      this.lostWrites = false;
      this.options.logger.warn(
        'Redis is back after failed writes: rebuilding projections and enqueueing every key',
      );
      await this.rebuild('redis came back').catch((err: unknown) => {
        this.lostWrites = true;
        throw err;
      });
    } else if (!(await this.store.isSynced())) {
      this.options.logger.warn(
        'Redis lost the projections (restarted empty?): rebuilding them and enqueueing every key',
      );
      await this.rebuild('redis came back empty');
    }
  }

  private async changed(
    w: Watched,
    type: WatchEvent['type'],
    obj: KubernetesObject,
    old?: KubernetesObject,
  ): Promise<void> {
    if (w.kind === 'Policy')
      this.index(
        type === 'deleted' ? undefined : obj,
        old ?? (type === 'deleted' ? obj : undefined),
      );
    const name = obj.metadata?.name ?? '';
    await this.serialized(async () => {
      // Before going live the initial rebuild writes everything at once.
      if (!this.live) return;
      if (w.kind === 'Policy') this.trackConvergence(type, obj, old);
      try {
        // Projection first, then the key: a job must never read older state than its event.
        if (type === 'deleted') await this.store.remove(w.projected, name, podServer(obj));
        else {
          const oldServer = old ? podServer(old) : undefined;
          if (w.projected === 'pod' && oldServer !== podServer(obj))
            await this.store.remove('pod', name, oldServer);
          await this.store.put(w.projected, obj as never);
        }
        await this.enqueue({
          kind: w.kind,
          type,
          object: obj as WatchedObject,
          old: old as WatchedObject | undefined,
        });
      } catch (err) {
        this.lostWrites = true;
        throw err;
      }
    });
  }

  /**
   * Event-to-status latency, measured where both ends are visible: the watch event that
   * brought a new generation, and the later one whose status observed it. Generations that
   * changed while this watcher was not leading are not measured.
   */
  private trackConvergence(
    type: WatchEvent['type'],
    obj: KubernetesObject,
    old: KubernetesObject | undefined,
  ): void {
    const name = obj.metadata?.name ?? '';
    if (type === 'deleted') {
      this.awaitingStatus.delete(name);
      return;
    }
    const generation = obj.metadata?.generation ?? 0;
    const observed =
      (obj as { status?: { observedGeneration?: number } }).status?.observedGeneration ?? 0;
    const waiting = this.awaitingStatus.get(name);
    if (waiting && observed >= waiting.generation) {
      this.convergence?.observe((Date.now() - waiting.since) / 1000);
      this.awaitingStatus.delete(name);
    }
    if (generation > observed && generation !== (old?.metadata?.generation ?? 0))
      this.awaitingStatus.set(name, { generation, since: Date.now() });
  }

  private index(now: KubernetesObject | undefined, before: KubernetesObject | undefined): void {
    const serverOf = (o: KubernetesObject | undefined) =>
      (o as { spec?: { policyServer?: string } } | undefined)?.spec?.policyServer;
    const name = (now ?? before)?.metadata?.name;
    if (!name) return;
    const prev = serverOf(before);
    if (prev) this.policiesByServer.get(prev)?.delete(name);
    const next = serverOf(now);
    if (next) {
      const set = this.policiesByServer.get(next) ?? new Set<string>();
      set.add(name);
      this.policiesByServer.set(next, set);
    }
  }

  private readonly clusterIndex: ClusterIndex = {
    policiesOfServer: (server) => [...(this.policiesByServer.get(server) ?? [])],
  };

  private keysFor(event: WatchEvent): string[] {
    return this.options.functions.flatMap((f) => f.keysFor(event, this.clusterIndex));
  }

  private async enqueue(event: WatchEvent): Promise<void> {
    await this.enqueueKeys(new Set(this.keysFor(event)));
  }

  /** Enqueues in bounded batches: a resync may produce thousands of keys. */
  private async enqueueKeys(keys: Set<string>): Promise<void> {
    const all = [...keys];
    for (let i = 0; i < all.length; i += 200) {
      await Promise.all(all.slice(i, i + 200).map((key) => this.options.queue.enqueue(key)));
    }
  }

  /** Every key that any watched object implies, each once (many pods imply the same policy keys). */
  private async enqueueAll(why: string): Promise<void> {
    const keys = new Set<string>();
    for (const w of this.watched()) {
      // Pods and ReplicaSets imply the keys of their server: one object per server says it all
      // (10,000 pods of one server would otherwise compute the same keys 10,000 times).
      const perServer = w.kind === 'Pod' || w.kind === 'ReplicaSet';
      const seen = new Set<string | undefined>();
      for (const obj of this.reflectors.get(w.kind)?.list() ?? []) {
        if (perServer) {
          const server = podServer(obj);
          if (seen.has(server)) continue;
          seen.add(server);
        }
        for (const key of this.keysFor({
          kind: w.kind,
          type: 'resync',
          object: obj as WatchedObject,
        }))
          keys.add(key);
      }
    }
    await this.enqueueKeys(keys);
    this.options.logger.info({ why, keys: keys.size }, 'enqueued every key');
  }
}
