// A list+watch cache for one resource type that never gives up: the replacement for
// @kubernetes/client-node's informer (see DESIGN.md, "Known pitfalls").
import { setTimeout as sleep } from 'node:timers/promises';
import type { KubernetesObject } from '@kubernetes/client-node';
import { z } from 'zod';
import { statusCodeOf } from './errors.ts';
import { backoffDelay, spread, type BackoffOptions } from '../backoff.ts';
import {
  asStatus,
  getJson,
  METADATA_ONLY,
  watchJson,
  type ApiTarget,
  type KubeStatus,
} from './api.ts';

/** The event types a watch stream carries. */
export type WatchEventType = 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';

/**
 * Why a watch ended (and was started again):
 * - `closed`: the server ended it normally (its `timeoutSeconds` elapsed); resumes at once.
 * - `stale`: nothing arrived, not even a bookmark, for `staleAfterMs`; the reflector aborted
 *   it and resumes from the last resourceVersion.
 * - `gone`: 410 Gone, as an HTTP status or an ERROR event: the resourceVersion left the
 *   apiserver's window, so the reflector relists.
 * - `error`: anything else (network, 403, 5xx, an ERROR event); resumes after a backoff.
 */
export type WatchEndReason = 'closed' | 'stale' | 'gone' | 'error';

/** Why the reflector listed: the first sync, or a 410 that made its resourceVersion useless. */
export type RelistReason = 'initial' | 'gone';

/**
 * Counters a reflector reports; every hook is optional and must not throw. Adapt them to
 * prom-client with `reflectorMetrics()` from ./metrics.ts, or count them in a test.
 */
export interface ReflectorMetrics {
  watchRestarted?(reason: WatchEndReason): void;
  relisted?(reason: RelistReason): void;
  received?(type: WatchEventType): void;
  /** A list or watch request failed, or a handler threw. */
  failed?(stage: 'list' | 'watch' | 'handler', err: unknown): void;
}

/** The subset of a pino logger the reflector uses. */
export interface ReflectorLogger {
  warn(obj: object, msg: string): void;
  debug(obj: object, msg: string): void;
}

/**
 * What a consumer hears. Handlers run one at a time, in the order the reflector saw the
 * changes; a handler that returns a promise is awaited before the next one runs, so a
 * consumer can write projections without reordering them. Because of that a slow handler
 * delays later ones (events queue in memory); the store itself is always current.
 * A handler that throws is logged and counted, and the next one still runs.
 */
export interface ReflectorHandlers<T extends KubernetesObject> {
  onAdd?(obj: T): void | Promise<void>;
  onUpdate?(oldObj: T, newObj: T): void | Promise<void>;
  /**
   * `finalStateUnknown` is true for a delete inferred by a relist: the object vanished while
   * the reflector was not watching, and `obj` is the last state it saw.
   */
  onDelete?(obj: T, finalStateUnknown: boolean): void | Promise<void>;
  /**
   * After every (re)list, once the adds, updates and deletes that reconcile the store with
   * the list have been delivered: `objects` is the full list, so a consumer may also rebuild
   * its projection from it.
   */
  onSynced?(objects: readonly T[]): void | Promise<void>;
  /** Every `resyncMs` once synced, with everything in the store; no API call is made. */
  onResync?(objects: readonly T[]): void | Promise<void>;
}

export interface ReflectorOptions<T extends KubernetesObject> extends ReflectorHandlers<T> {
  /** The apiserver (lib/kube/api.ts). */
  api: ApiTarget;
  /** The list URL path, e.g. `/api/v1/namespaces/default/configmaps` or `/apis/apps/v1/deployments`. */
  path: string;
  labelSelector?: string;
  fieldSelector?: string;
  /**
   * List and watch the objects' metadata only (PartialObjectMetadata, kind
   * `PartialObjectMetadata`): the apiserver never sends the rest, e.g. a Secret's data.
   */
  metadataOnly?: boolean;
  /** Applied to every listed or watched object before it is stored or delivered (e.g. to drop a Secret's data). */
  transform?: (obj: T) => T;
  /** Objects per list page (`limit`). Default 500. */
  pageSize?: number;
  /** Server-side watch timeout; each watch asks for a random value in [t, 2t). Default 300 s. */
  watchTimeoutSeconds?: number;
  /**
   * A watch that delivers nothing, not even a bookmark, for this long is aborted and started
   * again. Default 150 s: the apiserver bookmarks a quiet watch only every one to two
   * minutes (measured on the local cluster: 60 s for a watch from "now", 120 s for one
   * resumed from a list), so a shorter limit would keep reopening healthy quiet watches.
   */
  staleAfterMs?: number;
  /** Period of `onResync`. Default 10 min; 0 disables it. */
  resyncMs?: number;
  /** Delays after failures; unset fields come from `defaultWatchBackoff`. */
  backoff?: Partial<BackoffOptions>;
  /**
   * Seeds the store and watches from `resourceVersion` instead of listing first, e.g. to
   * resume from a projection persisted with the version it reflects (see `resourceVersion`).
   * The seed counts as synced and is not delivered as adds. If the version has expired, the
   * 410 makes the reflector relist and deliver the difference to the seed.
   */
  resumeFrom?: { objects: readonly T[]; resourceVersion: string };
  metrics?: ReflectorMetrics;
  logger?: ReflectorLogger;
}

/** The key of an object in the store: `namespace/name`, or `name` for cluster-scoped objects. */
export function objectKey(obj: KubernetesObject): string {
  const { name = '', namespace } = obj.metadata ?? {};
  return namespace ? `${namespace}/${name}` : name;
}

/** What turns the store into a freshly listed state. */
export interface StoreDiff<T> {
  added: T[];
  /** `[old, new]` pairs whose resourceVersion differs. */
  updated: Array<[T, T]>;
  /** Objects in the store that the list no longer has. */
  deleted: T[];
}

/** Compares the store with a list; objects with an unchanged resourceVersion are left out. */
export function diffStore<T extends KubernetesObject>(
  store: ReadonlyMap<string, T>,
  listed: readonly T[],
): StoreDiff<T> {
  const diff: StoreDiff<T> = { added: [], updated: [], deleted: [] };
  const seen = new Set<string>();
  for (const obj of listed) {
    const key = objectKey(obj);
    seen.add(key);
    const old = store.get(key);
    if (!old) diff.added.push(obj);
    else if (old.metadata?.resourceVersion !== obj.metadata?.resourceVersion)
      diff.updated.push([old, obj]);
  }
  for (const [key, obj] of store) if (!seen.has(key)) diff.deleted.push(obj);
  return diff;
}

/** True for a Status that means "your resourceVersion is too old": 410 Gone / reason Expired. */
export function isGone(status: KubeStatus | undefined): boolean {
  return status?.code === 410 || status?.reason === 'Expired' || status?.reason === 'Gone';
}

/** Classifies how a watch request ended: normally (nothing), or with this error. */
export function classifyWatchEnd(err: unknown): WatchEndReason {
  if (err === null || err === undefined) return 'closed';
  return statusCodeOf(err) === 410 ? 'gone' : 'error';
}

const objectSchema = z.looseObject({
  metadata: z.looseObject({
    name: z.string().min(1),
    namespace: z.string().optional(),
    resourceVersion: z.string().optional(),
  }),
});
const bookmarkSchema = z.looseObject({ metadata: z.looseObject({ resourceVersion: z.string() }) });
const listSchema = z.looseObject({
  apiVersion: z.string().optional(),
  kind: z.string().optional(),
  metadata: z.looseObject({ resourceVersion: z.string(), continue: z.string().optional() }),
  // An empty PartialObjectMetadataList says `items: null`.
  items: z
    .array(objectSchema)
    .nullish()
    .transform((items) => items ?? []),
});

/** The reflector's retries: 200 ms doubling to 30 s, 50 % jitter. */
export const defaultWatchBackoff: BackoffOptions = {
  baseMs: 200,
  capMs: 30_000,
  factor: 2,
  jitter: 0.5,
};

/** A watch lasting this long counts as healthy even without data, so the next failure backs off from the start. */
const healthyWatchMs = 1_000;

interface WatchOutcome {
  reason: WatchEndReason | 'stopped';
  error?: unknown;
  sawData: boolean;
  openMs: number;
}

/**
 * Lists, then watches one resource type and keeps every object in memory, keyed by
 * `objectKey`. It never stops on its own: a watch that ends is resumed from the last
 * resourceVersion (bookmarks advance it), a 410 relists, other errors back off
 * exponentially with jitter, and a silent watch is aborted after `staleAfterMs`.
 *
 * `stop()` ends every request and timer and keeps the store; `start()` again resumes from
 * the last resourceVersion. Objects are the reflector's own: treat them as read-only.
 *
 * ```ts
 * const pods = new Reflector<V1Pod>({
 *   api, path: '/api/v1/namespaces/rollcall-system/pods', labelSelector: 'rollcall.dev/policy-server',
 *   onAdd: (pod) => enqueue(pod), onUpdate: (_, pod) => enqueue(pod), onDelete: (pod) => enqueue(pod),
 *   onSynced: (all) => reconcileProjection(all), onResync: (all) => all.forEach(enqueue),
 *   metrics: reflectorMetrics(registry, 'pods'),
 * });
 * pods.start();
 * ```
 */
export class Reflector<T extends KubernetesObject> {
  readonly #options: ReflectorOptions<T>;
  readonly #store = new Map<string, T>();
  #resourceVersion: string | undefined;
  #synced = false;
  #stop: AbortController | undefined;
  #running: Promise<void> | undefined;
  #resyncTimer: NodeJS.Timeout | undefined;
  #delivery: Promise<void> = Promise.resolve();
  #resyncQueued = false;

  constructor(options: ReflectorOptions<T>) {
    this.#options = options;
    if (options.resumeFrom) {
      for (const obj of options.resumeFrom.objects) this.#store.set(objectKey(obj), obj);
      this.#resourceVersion = options.resumeFrom.resourceVersion;
      this.#synced = true;
    }
  }

  /** Starts listing and watching; a no-op when running. */
  start(): void {
    if (this.#running) return;
    const stop = new AbortController();
    this.#stop = stop;
    this.#running = this.#run(stop.signal);
    const { resyncMs = 600_000, onResync } = this.#options;
    if (resyncMs > 0 && onResync) {
      this.#resyncTimer = setInterval(() => {
        // Behind slow handlers, one queued resync is enough.
        if (!this.#synced || this.#resyncQueued) return;
        this.#resyncQueued = true;
        this.#deliver(() => {
          this.#resyncQueued = false;
          return onResync(this.list());
        });
      }, resyncMs);
    }
  }

  /** Stops watching and resolves once no request, timer or handler is left running. */
  async stop(): Promise<void> {
    clearInterval(this.#resyncTimer);
    this.#resyncTimer = undefined;
    this.#stop?.abort();
    await this.#running;
    this.#running = undefined;
    await this.#delivery;
  }

  /** True once the store holds a complete list (or the `resumeFrom` seed); handlers may still be catching up. */
  hasSynced(): boolean {
    return this.#synced;
  }

  /** Every object in the store. */
  list(): T[] {
    return [...this.#store.values()];
  }

  /** The object stored under `key` (`namespace/name` or `name`). */
  get(key: string): T | undefined {
    return this.#store.get(key);
  }

  /**
   * The resourceVersion the store reflects (advanced by events and bookmarks), or undefined
   * before the first list. It can be ahead of handlers still queued: to persist it with a
   * projection for `resumeFrom`, read it once the handlers caught up.
   */
  get resourceVersion(): string | undefined {
    return this.#resourceVersion;
  }

  async #run(signal: AbortSignal): Promise<void> {
    const { metrics, logger } = this.#options;
    const backoff = { ...defaultWatchBackoff, ...this.#options.backoff };
    let relist: RelistReason | undefined =
      this.#resourceVersion === undefined ? 'initial' : undefined;
    let failures = 0;
    while (!signal.aborted) {
      let delay = 0;
      if (relist) {
        try {
          await this.#relist(signal);
          metrics?.relisted?.(relist);
          relist = undefined;
        } catch (err) {
          if (signal.aborted) break;
          metrics?.failed?.('list', err);
          logger?.warn({ err, path: this.#options.path }, 'list failed; retrying');
          // An expired continue token (410) is answered by listing from the start.
          relist = statusCodeOf(err) === 410 ? 'gone' : relist;
          delay = backoffDelay(++failures, backoff);
        }
      } else {
        const outcome = await this.#watch(signal);
        if (outcome.reason === 'stopped') break;
        metrics?.watchRestarted?.(outcome.reason);
        if (outcome.reason === 'error') {
          metrics?.failed?.('watch', outcome.error);
          logger?.warn(
            { err: outcome.error, path: this.#options.path },
            'watch failed; restarting',
          );
        } else {
          logger?.debug(
            { reason: outcome.reason, path: this.#options.path },
            'watch ended; restarting',
          );
        }
        if (outcome.reason === 'gone') relist = 'gone';
        if (outcome.sawData) failures = 0;
        const healthy = outcome.sawData || outcome.openMs >= healthyWatchMs;
        if (outcome.reason === 'error' || !healthy) delay = backoffDelay(++failures, backoff);
      }
      if (delay > 0) await sleep(delay, undefined, { signal }).catch(() => {});
    }
  }

  /** Lists every page, reconciles the store with it and delivers the difference. */
  async #relist(signal: AbortSignal): Promise<void> {
    const { api, path, labelSelector, fieldSelector, metadataOnly, pageSize = 500 } = this.#options;
    const items: T[] = [];
    let resourceVersion = '';
    let continueToken: string | undefined;
    do {
      const page = listSchema.parse(
        await getJson(
          api,
          path,
          { labelSelector, fieldSelector, limit: pageSize, continue: continueToken },
          signal,
          metadataOnly ? METADATA_ONLY.list : undefined,
        ),
      );
      // List items carry no apiVersion/kind; fill them in so consumers see the same shape as from the watch.
      const kind = page.kind?.replace(/List$/, '');
      for (const item of page.items) {
        const obj = { apiVersion: page.apiVersion, kind, ...item } as unknown as T;
        items.push(this.#options.transform ? this.#options.transform(obj) : obj);
      }
      resourceVersion = page.metadata.resourceVersion;
      continueToken = page.metadata.continue || undefined;
    } while (continueToken);

    const diff = diffStore(this.#store, items);
    this.#store.clear();
    for (const obj of items) this.#store.set(objectKey(obj), obj);
    this.#resourceVersion = resourceVersion;
    this.#synced = true;

    const { onAdd, onUpdate, onDelete, onSynced } = this.#options;
    for (const obj of diff.deleted) if (onDelete) this.#deliver(() => onDelete(obj, true));
    for (const obj of diff.added) if (onAdd) this.#deliver(() => onAdd(obj));
    for (const [old, obj] of diff.updated) if (onUpdate) this.#deliver(() => onUpdate(old, obj));
    if (onSynced) this.#deliver(() => onSynced(items));
  }

  /**
   * Runs one watch from the current resourceVersion until it ends, goes stale, reports an
   * error or the reflector stops; resolves only after its connection is closed.
   */
  async #watch(signal: AbortSignal): Promise<WatchOutcome> {
    const {
      api,
      path,
      labelSelector,
      fieldSelector,
      watchTimeoutSeconds = 300,
      staleAfterMs = 150_000,
    } = this.#options;
    const openedAt = Date.now();
    let sawData = false;
    let ended: Pick<WatchOutcome, 'reason' | 'error'> | undefined;
    let end!: (outcome: Pick<WatchOutcome, 'reason' | 'error'>) => void;
    const endedPromise = new Promise<Pick<WatchOutcome, 'reason' | 'error'>>((resolve) => {
      end = (outcome) => {
        if (ended) return;
        ended = outcome;
        resolve(outcome);
      };
    });

    const staleTimer = setTimeout(() => end({ reason: 'stale' }), staleAfterMs);
    const onStop = () => end({ reason: 'stopped' });
    signal.addEventListener('abort', onStop, { once: true });
    if (signal.aborted) onStop();

    const query = {
      resourceVersion: this.#resourceVersion,
      allowWatchBookmarks: true,
      timeoutSeconds: spread(watchTimeoutSeconds),
      labelSelector,
      fieldSelector,
    };
    const onEvent = (type: string, obj: unknown) => {
      if (ended) return; // the watch is being torn down: its events no longer count
      staleTimer.refresh();
      this.#options.metrics?.received?.(type as WatchEventType);
      // An ERROR event is not a sign of health: a watch failing at once must still back off.
      if (type !== 'ERROR') sawData = true;
      if (type === 'ERROR') {
        const status = asStatus(obj);
        end(
          isGone(status)
            ? { reason: 'gone' }
            : { reason: 'error', error: new Error(`watch ERROR event: ${JSON.stringify(status)}`) },
        );
        return;
      }
      if (type === 'BOOKMARK') {
        // A bookmark carries only the resourceVersion the watch has reached.
        const version = bookmarkSchema.safeParse(obj).data?.metadata.resourceVersion;
        if (version) this.#resourceVersion = version;
        return;
      }
      const parsed = objectSchema.safeParse(obj);
      if (!parsed.success) {
        this.#options.logger?.warn({ type, path }, 'ignoring a malformed watch event');
        return;
      }
      const item = parsed.data as unknown as T;
      this.#apply(type, this.#options.transform ? this.#options.transform(item) : item);
    };

    const connection = new AbortController();
    const watching = ended
      ? Promise.resolve()
      : watchJson(
          api,
          path,
          query,
          onEvent,
          connection.signal,
          this.#options.metadataOnly ? METADATA_ONLY.watch : undefined,
        ).then(
          () => end({ reason: 'closed' }),
          (err: unknown) => end(errOutcome(err)),
        );
    const outcome = await endedPromise;
    connection.abort();
    await watching;
    clearTimeout(staleTimer);
    signal.removeEventListener('abort', onStop);
    return { ...outcome, sawData, openMs: Date.now() - openedAt };
  }

  /** Applies one watch event to the store and queues its delivery. */
  #apply(type: string, obj: T): void {
    const version = obj.metadata?.resourceVersion;
    if (version) this.#resourceVersion = version;
    const key = objectKey(obj);
    const old = this.#store.get(key);
    const { onAdd, onUpdate, onDelete } = this.#options;
    if (type === 'ADDED' || type === 'MODIFIED') {
      this.#store.set(key, obj);
      if (old && onUpdate) this.#deliver(() => onUpdate(old, obj));
      else if (!old && onAdd) this.#deliver(() => onAdd(obj));
    } else if (type === 'DELETED') {
      this.#store.delete(key);
      if (onDelete) this.#deliver(() => onDelete(obj, false));
    }
  }

  /** Queues a handler call behind the ones before it. */
  #deliver(call: () => void | Promise<void>): void {
    this.#delivery = this.#delivery.then(call).catch((err: unknown) => {
      this.#options.metrics?.failed?.('handler', err);
      this.#options.logger?.warn({ err, path: this.#options.path }, 'a reflector handler failed');
    });
  }
}

function errOutcome(err: unknown): Pick<WatchOutcome, 'reason' | 'error'> {
  const reason = classifyWatchEnd(err);
  return reason === 'error' ? { reason, error: err } : { reason };
}
