// The audit's watches: the watcher's part of the continuous audit. The resources the audited
// Policies' rules name (resolved through discovery) are listed and watched as metadata only;
// each object is kept as {uid, resourceVersion, labels} in Redis (audit-store.ts) and its
// namespace's `audit/<namespace>` key is enqueued when it changes. Which generation of each
// Policy is fully covered (every resource it names listed) is written for audit-summary.
import type { KubernetesObject } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { ApiTarget } from '../../lib/kube/api.ts';
import { Reflector } from '../../lib/kube/reflector.ts';
import type { Policy } from '../../api/v1alpha1.ts';
import {
  auditedPolicy,
  collectionPath,
  resourceId,
  ruleAudits,
  type AuditedPolicy,
  type AuditedResource,
} from '../functions/audit-match.ts';
import { AuditStore, CLUSTER_SCOPE, type AuditedObject } from '../projections/audit-store.ts';
import type { WorkQueue } from '../queue/index.ts';
import { discoverResources } from './discovery.ts';
import { reflectorMetrics } from './metrics.ts';

/** Discovery is asked again at most this often when a rule names something it has not seen. */
const REDISCOVER_MS = 30_000;

export interface AuditWatchOptions {
  api: ApiTarget;
  store: AuditStore;
  queue: WorkQueue;
  logger: Logger;
  metrics?: Registry;
  staleAfterMs?: number;
  /** Counts objects handled, so that the memory a burst of them freed goes back to the OS. */
  noteWork?: (count: number) => void;
}

interface Watched {
  resource: AuditedResource;
  reflector: Reflector<KubernetesObject>;
}

const compactObject = (obj: KubernetesObject): KubernetesObject => {
  const { name, namespace, uid, resourceVersion, labels } = obj.metadata ?? {};
  return { metadata: { name, namespace, uid, resourceVersion, labels } };
};

const stored = (obj: KubernetesObject): AuditedObject => ({
  u: obj.metadata?.uid ?? '',
  v: obj.metadata?.resourceVersion ?? '',
  ...(obj.metadata?.labels && { l: obj.metadata.labels }),
});

const namespaceOf = (obj: KubernetesObject) => obj.metadata?.namespace ?? CLUSTER_SCOPE;

export class AuditWatch {
  private readonly o: AuditWatchOptions;
  private readonly watched = new Map<string, Watched>();
  private readonly policies = new Map<string, AuditedPolicy>();
  private discovered: AuditedResource[] | undefined;
  private discoveredAt = 0;
  /** Writes run in order: a relist's snapshot never overwrites a later event. */
  private writes: Promise<unknown> = Promise.resolve();
  private pending: NodeJS.Timeout | undefined;
  private reconciling: Promise<void> = Promise.resolve();
  private stopped = false;
  /** namespaces(), until the watches' stores change. */
  private namespaceList: string[] | undefined;
  /** Policies (`<uid>/<generation>`) last written as covered. */
  private covered = new Map<string, string>();

  constructor(options: AuditWatchOptions) {
    this.o = options;
  }

  /**
   * A Policy changed (undefined: deleted). When what it audits changed, recompute what to
   * watch soon (many events come together).
   */
  policyChanged(name: string, policy: Policy | undefined): void {
    const now = policy && auditedPolicy(policy);
    const before = this.policies.get(name);
    if (now) this.policies.set(name, now);
    else this.policies.delete(name);
    if (JSON.stringify(now) !== JSON.stringify(before)) this.schedule(100);
  }

  /** Chooses the watched resources again after `ms` (many Policy events come together). */
  private schedule(ms: number): void {
    if (this.stopped) return;
    this.pending ??= setTimeout(() => {
      this.pending = undefined;
      // One at a time: two must never both start a watch of the same resource.
      this.reconciling = this.reconciling
        .then(() => this.reconcile())
        .catch((err: unknown) => {
          this.o.logger.warn({ err }, 'audit: choosing the watched resources failed; trying again');
          this.schedule(5000);
        });
    }, ms);
  }

  /**
   * The namespaces holding audited objects, from the watches' stores: computed again only
   * after an object came, went or was relisted (every served Policy's event asks for them).
   */
  namespaces(): string[] {
    if (this.namespaceList) return this.namespaceList;
    const out = new Set<string>();
    for (const { reflector } of this.watched.values())
      for (const obj of reflector.list()) out.add(namespaceOf(obj));
    this.namespaceList = [...out];
    return this.namespaceList;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.pending);
    const all = [...this.watched.values()];
    this.watched.clear();
    await Promise.all(all.map((w) => w.reflector.stop()));
  }

  /**
   * Writes every watched object again and enqueues every namespace (Redis lost them, or the
   * periodic resync), and asks discovery again (a CRD a rule names may have been installed).
   */
  rewriteAll(): Promise<void> {
    this.discovered = undefined;
    this.schedule(0);
    return this.serialized(async () => {
      const touched = new Set(this.namespaces());
      for (const w of this.watched.values())
        if (w.reflector.hasSynced())
          for (const ns of await this.replace(w, w.reflector.list())) touched.add(ns);
      await this.writeResources();
      this.covered.clear();
      await this.writeCoverage();
      await this.enqueue([...touched]);
    });
  }

  private serialized(fn: () => Promise<void>): Promise<void> {
    const run = this.writes.then(fn, fn);
    this.writes = run.catch((err: unknown) =>
      this.o.logger.warn({ err }, 'audit: writing the watched objects failed'),
    );
    return run;
  }

  private async reconcile(): Promise<void> {
    if (this.stopped) return;
    const wanted = await this.wantedResources();
    for (const [id, w] of this.watched) {
      if (wanted.has(id)) continue;
      this.watched.delete(id);
      this.namespaceList = undefined;
      await w.reflector.stop();
      // Its objects leave the namespaces' projections; the runs drop their results.
      await this.serialized(async () =>
        this.enqueue(await this.o.store.replaceResource(id, new Map())),
      );
    }
    for (const [id, resource] of wanted) if (!this.watched.has(id)) this.start(id, resource);
    await this.serialized(async () => {
      await this.writeResources();
      await this.writeCoverage();
    });
  }

  /** The resources some audited Policy's rules name; discovery asked again if one is unknown. */
  private async wantedResources(): Promise<Map<string, AuditedResource>> {
    const pick = (all: readonly AuditedResource[]) =>
      new Map(
        all
          .filter((r) =>
            [...this.policies.values()].some((p) => p.rules.some((rule) => ruleAudits(rule, r))),
          )
          .map((r) => [resourceId(r), r]),
      );
    const unresolved = () =>
      [...this.policies.values()].some((p) =>
        p.rules.some((rule) => !(this.discovered ?? []).some((r) => ruleAudits(rule, r))),
      );
    if (
      this.discovered === undefined ||
      (unresolved() && Date.now() - this.discoveredAt > REDISCOVER_MS)
    ) {
      this.discovered = await discoverResources(this.o.api);
      this.discoveredAt = Date.now();
    }
    return pick(this.discovered);
  }

  private start(id: string, resource: AuditedResource): void {
    // stop() may have come while reconcile awaited (discovery, a write): a watch started now
    // would outlive it and keep a terminating process alive.
    if (this.stopped) return;
    const w: Watched = {
      resource,
      reflector: new Reflector<KubernetesObject>({
        api: this.o.api,
        path: collectionPath(resource, undefined),
        metadataOnly: true,
        transform: compactObject,
        staleAfterMs: this.o.staleAfterMs,
        resyncMs: 0,
        logger: this.o.logger,
        metrics: this.o.metrics ? reflectorMetrics(this.o.metrics, `audit:${id}`) : undefined,
        // Before the first list is complete, onSynced writes it all at once.
        onAdd: (obj) => this.changed(w, obj, true),
        onUpdate: (_old, obj) => this.changed(w, obj, true),
        onDelete: (obj) => this.changed(w, obj, false),
        onSynced: (objects) => {
          this.namespaceList = undefined;
          return this.serialized(async () => {
            this.o.noteWork?.(objects.length);
            const touched = await this.replace(w, objects);
            await this.writeResources();
            await this.writeCoverage();
            await this.enqueue(touched);
          });
        },
      }),
    };
    this.watched.set(id, w);
    w.reflector.start();
  }

  private changed(w: Watched, obj: KubernetesObject, present: boolean): Promise<void> {
    this.namespaceList = undefined;
    if (!w.reflector.hasSynced()) return Promise.resolve();
    const ns = namespaceOf(obj);
    const key = `${resourceId(w.resource)}/${obj.metadata?.name ?? ''}`;
    return this.serialized(async () => {
      this.o.noteWork?.(1);
      await this.o.store.putObject(ns, key, present ? stored(obj) : undefined);
      await this.enqueue([ns]);
    });
  }

  /** Files a resource's objects whole; returns the namespaces whose objects changed. */
  private replace(w: Watched, objects: readonly KubernetesObject[]): Promise<string[]> {
    const byNamespace = new Map<string, Map<string, AuditedObject>>();
    for (const obj of objects) {
      const ns = namespaceOf(obj);
      const names = byNamespace.get(ns) ?? new Map<string, AuditedObject>();
      names.set(obj.metadata?.name ?? '', stored(obj));
      byNamespace.set(ns, names);
    }
    return this.o.store.replaceResource(resourceId(w.resource), byNamespace);
  }

  private async writeResources(): Promise<void> {
    await this.o.store.setResources(
      [...this.watched.values()].map((w) => ({ ...w.resource, synced: w.reflector.hasSynced() })),
    );
  }

  /**
   * Each audited Policy whose resources are all listed is covered at its generation; a Policy
   * newly covered has its summary enqueued (its first pass may be complete already).
   */
  private async writeCoverage(): Promise<void> {
    const covered = new Map<string, string>();
    for (const p of this.policies.values()) {
      const mine = [...this.watched.values()].filter((w) =>
        p.rules.some((rule) => ruleAudits(rule, w.resource)),
      );
      if (mine.every((w) => w.reflector.hasSynced()))
        covered.set(p.name, `${p.uid}/${p.generation}`);
    }
    const fresh = [...covered].filter(([p, c]) => this.covered.get(p) !== c).map(([p]) => p);
    if (fresh.length === 0 && covered.size === this.covered.size) return;
    await this.o.store.setCoverage(covered);
    this.covered = covered;
    await this.o.queue.enqueueMany(fresh.map((p) => `audit-summary/${p}`));
  }

  private async enqueue(namespaces: readonly string[]): Promise<void> {
    if (namespaces.length > 0)
      await this.o.queue.enqueueMany(namespaces.map((ns) => `audit/${ns}`));
  }
}
