// The watcher: while it holds the leader Lease, reflectors watch the kinds its functions
// declare (control-plane/registry.ts); each change updates its compact projection in Redis,
// then enqueues the keys the functions want for it. It never reconciles anything itself.
import type { KubernetesObject } from '@kubernetes/client-node';
import type { ApiTarget } from '../../lib/kube/api.ts';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type {
  ClusterIndex,
  ReconcileFunction,
  WatchEvent,
  WatchedObject,
} from '../functions/types.ts';
import { serversUsingSecret } from '../functions/managed-tls-core.ts';
import { compact, podServer, serverOf } from '../projections/project.ts';
import { ProjectionStore } from '../projections/store.ts';
import type { WorkQueue } from '../queue/index.ts';
import {
  keysFor,
  watchList,
  type ProjectedKind,
  type WatchedKind,
  type WatchSpec,
} from '../registry.ts';
import { isReplicated } from '../../lib/redis/client.ts';
import type { Policy } from '../../api/v1alpha1.ts';
import { AuditStore } from '../projections/audit-store.ts';
import { AuditWatch } from './audited.ts';
import { LeaderElector } from './leader.ts';
import { reflectorMetrics, watcherMetrics, type WatcherMetrics } from './metrics.ts';
import { objectKey, Reflector } from '../../lib/kube/reflector.ts';

export interface WatcherOptions {
  /** The apiserver (lib/kube/api.ts). */
  api: ApiTarget;
  /**
   * Where the keys go. The projections are written on its connection too: Redis runs the
   * commands of one connection in order, so an event's projection is written before its keys
   * are added even though both are sent at once.
   */
  queue: WorkQueue;
  /** The functions whose keys it enqueues; it watches the kinds they declare (control-plane/registry.ts). */
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
  /** A watch silent this long (no event, no bookmark) is restarted. Default: the reflector's, 150 s. */
  staleAfterMs?: number;
  metrics?: Registry;
  /**
   * Told how much work was done: each event written, and every object of a rebuild (roles.ts
   * gives the memory a burst freed back to the OS once it is over).
   */
  noteWork?: (count: number) => void;
}

/** An event whose writes failed, kept to be written again from the informer once Redis answers. */
interface Unwritten {
  w: WatchSpec;
  /** The object as the event had it (written as deleted if the informer no longer has it). */
  object: KubernetesObject;
  /** The version before the first failed event: its old server's entries may still hold it. */
  old: KubernetesObject | undefined;
}

export class Watcher {
  private readonly options: WatcherOptions;
  /** What it watches: the kinds its functions declare. */
  private readonly watches: readonly WatchSpec[];
  private readonly store: ProjectionStore;
  private readonly elector: LeaderElector;
  private reflectors = new Map<WatchedKind, Reflector<KubernetesObject>>();
  private timers: NodeJS.Timeout[] = [];
  /** Policy names by the PolicyServer they name, for mapping server-side events to keys. */
  private readonly policiesByServer = new Map<string, Set<string>>();
  private live = false;
  /**
   * Rebuild everything at the next check: a projection write or enqueue failed (one Redis), a
   * rebuild failed, or the primary lacks writes it acknowledged (Sentinel, Cluster).
   */
  private lostWrites = false;
  /**
   * Sentinel and Cluster only. A failover may promote a replica that missed the last writes
   * (replication is asynchronous), and a write that failed while no primary answered is not
   * lost by Redis. So the watcher counts its writes in Redis (`proj:generation`, after each
   * event's projection and keys: replication keeps that order) and remembers the count it was
   * acknowledged. A primary whose count is lower lost writes and gets a full rebuild; failed
   * writes are written again, one object each, from the informers.
   */
  private readonly countsWrites: boolean;
  /** The write count Redis acknowledged last, while leading. */
  private acked: number | undefined;
  /** Failed writes by object (countsWrites only): bounded by the number of watched objects. */
  private readonly unwritten = new Map<string, Unwritten>();
  /**
   * Projection writes and rebuilds run one at a time: a rebuild's snapshot must never
   * overwrite an event that was written after the snapshot was taken.
   */
  private writes: Promise<unknown> = Promise.resolve();
  /** Policies whose new generation has no status yet: when the watcher saw that generation. */
  private readonly awaitingStatus = new Map<string, { generation: number; since: number }>();
  private readonly metrics: WatcherMetrics | undefined;
  /** The audit's watches, while leading (audited.ts). */
  private audit: AuditWatch | undefined;

  constructor(options: WatcherOptions) {
    this.options = options;
    this.watches = watchList(options.functions, options.namespace);
    const redis = options.queue.redis;
    this.store = new ProjectionStore(redis, options.prefix);
    this.countsWrites = isReplicated(redis);
    // Once a new primary answers, write what failed during the failover now, not at the next check.
    if (this.countsWrites)
      redis.on('ready', () => {
        if (this.live)
          this.checkRedis().catch((err: unknown) =>
            options.logger.warn({ err }, 'writing the failed writes again failed'),
          );
      });
    this.elector = new LeaderElector({
      api: options.api,
      namespace: options.namespace,
      name: options.leaseName ?? 'rollcall-watcher',
      identity: options.identity,
      leaseDurationSeconds: options.leaseDurationSeconds ?? 15,
      logger: options.logger,
      onStartedLeading: () => this.lead(),
      onStoppedLeading: () => this.standBy(),
    });
    if (options.metrics) this.metrics = watcherMetrics(options.metrics, () => this.isLeader());
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

  private lead(): void {
    const { logger } = this.options;
    logger.info('leading: starting informers');
    this.audit = new AuditWatch({
      api: this.options.api,
      store: new AuditStore(this.options.queue.redis, this.options.prefix),
      queue: this.options.queue,
      logger,
      metrics: this.options.metrics,
      staleAfterMs: this.options.staleAfterMs,
      noteWork: this.options.noteWork,
    });
    for (const w of this.watches) {
      const reflector: Reflector<KubernetesObject> = new Reflector<KubernetesObject>({
        api: this.options.api,
        path: w.path,
        labelSelector: w.labelSelector,
        metadataOnly: w.metadataOnly,
        // The informers keep each object as its compact projection, as controller-runtime's
        // cache transforms do: no managed fields, specs or annotations rollcall never reads
        // (and no Secret data, which the apiserver does not even send: metadataOnly).
        transform: (obj) => compact(w.projection, obj) as KubernetesObject,
        staleAfterMs: this.options.staleAfterMs,
        resyncMs: 0, // one resync timer for all kinds, below
        logger,
        metrics: this.options.metrics
          ? reflectorMetrics(this.options.metrics, w.projection)
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
    this.acked = undefined;
    this.unwritten.clear();
    for (const t of this.timers) clearInterval(t);
    this.timers = [];
    const reflectors = [...this.reflectors.values()];
    this.reflectors.clear();
    const audit = this.audit;
    this.audit = undefined;
    await Promise.all([...reflectors.map((r) => r.stop()), audit?.stop()]);
  }

  /** Tells the audit's watches what every Policy is now. */
  private auditPolicies(): void {
    for (const p of this.reflectors.get('Policy')?.list() ?? [])
      this.audit?.policyChanged(p.metadata?.name ?? '', p as Policy);
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
    return this.serialized(() => this.rebuildNow(why, goLive));
  }

  /** rebuild's body, for callers already in the write order. */
  private async rebuildNow(why: string, goLive = false): Promise<void> {
    if (goLive && this.live) return; // another reflector's sync got here first
    // Stepped down meanwhile: empty stores must never overwrite the new leader's projections.
    if (this.reflectors.size === 0) return;
    const objects: Partial<Record<ProjectedKind, KubernetesObject[]>> = {};
    for (const w of this.watches) objects[w.projection] = this.reflectors.get(w.kind)?.list() ?? [];
    this.policiesByServer.clear();
    for (const p of objects.policy ?? []) this.index(p, undefined);
    const count = Object.values(objects).reduce((n, l) => n + l.length, 0);
    try {
      await this.store.replaceAll(objects as never);
      // Live from inside the write order: an event that arrived after the snapshot is queued
      // behind this section and must be written, not skipped as "before live".
      if (goLive) this.live = true;
      this.options.logger.info({ why, objects: count }, 'projections written');
      await this.enqueueAll(why);
      this.auditPolicies();
      // Not awaited: its writes keep their own order, and a slow one must not hold the projections'.
      if (!goLive) void this.audit?.rewriteAll();
      this.metrics?.rebuilds.inc({ reason: why });
      this.options.noteWork?.(count);
      if (!this.countsWrites) return;
      // The snapshot covered every failed write (none run while a rebuild does), and the count
      // it leaves is the one to compare with from now on.
      this.unwritten.clear();
      this.lostWrites = false;
      this.acked = await this.store.countWrite();
    } catch (err) {
      if (this.countsWrites) this.lostWrites = true;
      throw err;
    }
  }

  /** A Redis that restarted empty has lost the projections and the queue: rebuild both. */
  private async checkRedis(): Promise<void> {
    // The initial rebuild failed (Redis was away just then): try again, or the watcher would
    // hold the lease without ever going live.
    if (!this.live) return this.maybeGoLive();
    if (this.countsWrites) return this.serialized(() => this.checkWrites());
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

  /**
   * Sentinel and Cluster (in the write order, so no count is in flight): a primary that lacks
   * writes it acknowledged, or the synced marker, gets a full rebuild; otherwise only the
   * writes that failed are written again.
   */
  private async checkWrites(): Promise<void> {
    const { logger } = this.options;
    const { synced, generation } = await this.store.writeState();
    const lost = !synced || generation < (this.acked ?? 0);
    if (lost)
      logger.warn(
        { synced, generation, acknowledged: this.acked },
        'the Redis primary lacks writes it acknowledged (a failover to a replica that missed them, or a Redis that came back empty): rebuilding projections and enqueueing every key',
      );
    if (lost || this.lostWrites)
      return this.rebuildNow(synced ? 'redis lost writes' : 'redis came back empty');
    if (this.unwritten.size === 0) return;
    const count = this.unwritten.size;
    for (const [id, { w, object, old }] of this.unwritten) {
      const current = this.reflectors.get(w.kind)?.get(objectKey(object));
      await this.write(w, current ? 'modified' : 'deleted', current ?? object, old);
      this.unwritten.delete(id);
    }
    logger.info(
      { objects: count, generation: this.acked },
      'Redis answers again and kept every acknowledged write: rewrote the failed writes, no rebuild',
    );
  }

  /** Counts one more acknowledged write; a count not above the last one means the primary lost some. */
  private async countWrite(): Promise<void> {
    const count = await this.store.countWrite();
    if (this.acked !== undefined && count <= this.acked) {
      this.options.logger.warn(
        { generation: count, acknowledged: this.acked },
        'the Redis primary lacks writes it acknowledged: rebuilding at the next check',
      );
      this.lostWrites = true;
    }
    this.acked = count;
  }

  private async changed(
    w: WatchSpec,
    type: WatchEvent['type'],
    obj: KubernetesObject,
    old?: KubernetesObject,
  ): Promise<void> {
    if (w.kind === 'Policy')
      this.index(
        type === 'deleted' ? undefined : obj,
        old ?? (type === 'deleted' ? obj : undefined),
      );
    let lap = performance.now();
    const stage = (which: string) => {
      const now = performance.now();
      this.metrics?.eventStages.observe(
        { resource: w.projection, stage: which },
        (now - lap) / 1000,
      );
      lap = now;
    };
    await this.serialized(async () => {
      // Before going live the initial rebuild writes everything at once.
      if (!this.live) return;
      stage('queued');
      if (w.kind === 'Policy') {
        this.trackConvergence(type, obj, old);
        this.audit?.policyChanged(
          obj.metadata?.name ?? '',
          type === 'deleted' ? undefined : (obj as Policy),
        );
      }
      this.options.noteWork?.(1);
      try {
        await this.write(w, type, obj, old, stage);
      } catch (err) {
        if (!this.countsWrites) this.lostWrites = true;
        else {
          const id = `${w.kind}/${objectKey(obj)}`;
          this.unwritten.set(id, { w, object: obj, old: this.unwritten.get(id)?.old ?? old });
        }
        throw err;
      }
    });
  }

  /**
   * One event's writes: projection first, then the keys (a job must never read older state
   * than its event). Both are sent at once, on one connection (see `queue`): one round trip.
   */
  private async write(
    w: WatchSpec,
    type: WatchEvent['type'],
    obj: KubernetesObject,
    old: KubernetesObject | undefined,
    stage: (which: 'projection' | 'enqueue') => void = () => {},
  ): Promise<void> {
    // `old`: filed under another server before (a pod relabelled, a Policy moved), it is unfiled.
    const projection =
      type === 'deleted'
        ? this.store.remove(w.projection, obj, old)
        : this.store.put(w.projection, obj, old);
    const keys = this.enqueue({
      kind: w.kind,
      type,
      object: obj as WatchedObject,
      old: old as WatchedObject | undefined,
    });
    // Settled together, so that a failed projection never leaves its keys' promise unhandled.
    const [written, enqueued] = await Promise.allSettled([
      projection.then(() => stage('projection')),
      keys,
    ]);
    if (written.status === 'rejected') throw written.reason;
    if (enqueued.status === 'rejected') throw enqueued.reason;
    stage('enqueue');
    if (this.countsWrites) await this.countWrite();
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
      this.metrics?.convergence.observe((Date.now() - waiting.since) / 1000);
      this.awaitingStatus.delete(name);
    }
    if (generation > observed && generation !== (old?.metadata?.generation ?? 0))
      this.awaitingStatus.set(name, { generation, since: Date.now() });
  }

  private index(now: KubernetesObject | undefined, before: KubernetesObject | undefined): void {
    const name = (now ?? before)?.metadata?.name;
    if (!name) return;
    const prev = before && serverOf('policy', before);
    if (prev) this.policiesByServer.get(prev)?.delete(name);
    const next = now && serverOf('policy', now);
    if (next) {
      const set = this.policiesByServer.get(next) ?? new Set<string>();
      set.add(name);
      this.policiesByServer.set(next, set);
    }
  }

  private readonly clusterIndex: ClusterIndex = {
    policiesOfServer: (server) => [...(this.policiesByServer.get(server) ?? [])],
    serversUsingSecret: (secret) =>
      serversUsingSecret(secret, this.reflectors.get('PolicyServer')?.list() ?? []),
    auditedNamespaces: () => this.audit?.namespaces() ?? [],
  };

  private keysFor(event: WatchEvent): string[] {
    return keysFor(this.options.functions, event, this.clusterIndex);
  }

  private async enqueue(event: WatchEvent): Promise<void> {
    await this.enqueueKeys(new Set(this.keysFor(event)));
  }

  /** Enqueues in bulk: one round trip per few hundred keys (a resync may produce thousands). */
  private async enqueueKeys(keys: Set<string>): Promise<void> {
    await this.options.queue.enqueueMany([...keys]);
  }

  /** Every key that any watched object implies, each once (many pods imply the same policy keys). */
  private async enqueueAll(why: string): Promise<void> {
    const keys = new Set<string>();
    for (const w of this.watches) {
      const seen = new Set<string | undefined>();
      for (const obj of this.reflectors.get(w.kind)?.list() ?? []) {
        // One object per server says it all (WatchableKind.keysPerServer).
        if (w.keysPerServer) {
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
