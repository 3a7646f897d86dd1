/**
 * One policy-server replica's state: the Policies of its server and their PolicyRevisions
 * (two reflectors), the load state of every needed (uid, generation), and the report it
 * publishes. A thin shell around lifecycle.ts: every change runs one reconcile pass that
 * plans loads, starts or drops them, and publishes the report.
 */
import type { KubernetesObject } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { POLICY_SERVER_LABEL } from '../api/constants.ts';
import { encodeReplicaReport } from '../api/report.ts';
import { backoffDelay, type BackoffOptions } from '../lib/backoff.ts';
import { Reflector, type ReflectorMetrics, type ReflectorOptions } from '../lib/kube/reflector.ts';
import {
  allNeeds,
  buildReport,
  neededLoads,
  nextRetryAt,
  planLoads,
  readiness,
  targetFor,
  type LoadKey,
  type LoadState,
  type Need,
  type PolicyEntry,
  type Readiness,
  type Target,
} from './lifecycle.ts';
import { loadNeed, type LoadDeps } from './load.ts';
import type { PolicyServerMetrics } from './metrics.ts';
import type { ApiTarget } from '../lib/kube/api.ts';

export interface ReplicaOptions {
  /** The apiserver, with this replica's credentials. */
  api: ApiTarget;
  /** The PolicyServer whose Policies this replica loads. */
  server: string;
  logger: Logger;
  metrics?: PolicyServerMetrics;
  /** Compiles (and downloads) policy code. */
  load: Pick<LoadDeps, 'compile' | 'fetch'>;
  /** Called with the serialized report whenever the replica might have a new one. */
  publish(report: string): void;
}

/** The replica's two watches. */
type Watch = 'policies' | 'revisions';

/** Retries of a failed download: 10 s doubling to 5 minutes. */
const downloadRetry: BackoffOptions = { baseMs: 10_000, capMs: 300_000, factor: 2, jitter: 0.2 };

export class Replica {
  readonly #options: ReplicaOptions;
  readonly #policies: Reflector<KubernetesObject>;
  readonly #revisions: Reflector<KubernetesObject>;
  readonly #states = new Map<LoadKey, LoadState>();
  readonly #inflight = new Map<LoadKey, AbortController>();
  #entries: PolicyEntry[] = [];
  #synced = { policies: false, revisions: false };
  /** Why a watch has not listed yet (e.g. a CRD without the spec.policyServer selectable field). */
  readonly #listErrors: { policies?: string; revisions?: string } = {};
  #reconciled = false;
  #scheduled = false;
  #retryTimer: NodeJS.Timeout | undefined;

  constructor(options: ReplicaOptions) {
    this.#options = options;
    const { server, logger } = options;
    this.#policies = this.#watch('policies', {
      path: '/apis/rollcall.dev/v1alpha1/policies',
      fieldSelector: `spec.policyServer=${server}`,
      logger: logger.child({ watch: 'policies' }),
    });
    this.#revisions = this.#watch('revisions', {
      path: '/apis/rollcall.dev/v1alpha1/policyrevisions',
      labelSelector: `${POLICY_SERVER_LABEL}=${server}`,
      logger: logger.child({ watch: 'policyrevisions' }),
    });
  }

  /** A reflector whose every change schedules a reconcile pass; synced once it has listed. */
  #watch(
    watch: Watch,
    what: Pick<
      ReflectorOptions<KubernetesObject>,
      'path' | 'fieldSelector' | 'labelSelector' | 'logger'
    >,
  ): Reflector<KubernetesObject> {
    const changed = () => this.#schedule();
    return new Reflector<KubernetesObject>({
      api: this.#options.api,
      ...what,
      onAdd: changed,
      onUpdate: changed,
      onDelete: changed,
      onSynced: () => {
        this.#synced[watch] = true;
        changed();
      },
      metrics: this.#listFailures(watch),
    });
  }

  start(): void {
    this.#policies.start();
    this.#revisions.start();
  }

  async stop(): Promise<void> {
    clearTimeout(this.#retryTimer);
    for (const c of this.#inflight.values()) c.abort();
    await Promise.all([this.#policies.stop(), this.#revisions.stop()]);
  }

  readiness(): Readiness {
    const r = readiness(this.#synced, this.#entries, this.#states);
    const errors = (['policies', 'revisions'] as const)
      .filter((watch) => !this.#synced[watch] && this.#listErrors[watch] !== undefined)
      .map((watch) => `${watch}: ${this.#listErrors[watch]}`);
    if (!r.ready && errors.length > 0)
      return { ready: false, detail: `${r.detail} (last list error: ${errors.join('; ')})` };
    // Synced, but the first pass has not yet said what to load.
    if (r.ready && !this.#reconciled) return { ready: false, detail: 'planning the first loads' };
    return r;
  }

  target(policy: string, generation: number): Target {
    return targetFor(this.#entries, this.#states, policy, generation);
  }

  /** The current report (what the pod's annotation should say). */
  report(): string {
    return encodeReplicaReport(buildReport(this.#entries, this.#states));
  }

  #listFailures(watch: Watch): ReflectorMetrics {
    return {
      failed: (stage, err) => {
        if (stage === 'list')
          this.#listErrors[watch] = err instanceof Error ? err.message : String(err);
      },
    };
  }

  /** One reconcile pass per burst of changes. */
  #schedule(): void {
    if (this.#scheduled) return;
    this.#scheduled = true;
    setImmediate(() => {
      this.#scheduled = false;
      this.#reconcile();
    });
  }

  #reconcile(): void {
    if (!this.#synced.policies || !this.#synced.revisions) return;
    const { logger } = this.#options;
    this.#entries = neededLoads(this.#policies.list(), this.#revisions.list());
    const plan = planLoads(allNeeds(this.#entries), this.#states, Date.now());
    for (const key of plan.drop) {
      this.#inflight.get(key)?.abort();
      this.#inflight.delete(key);
      this.#states.delete(key);
    }
    const needs = new Map(allNeeds(this.#entries).map((n) => [n.key, n]));
    for (const { key, state } of plan.fail) {
      this.#states.set(key, state);
      const need = needs.get(key);
      this.#options.metrics?.loaded(need?.policy ?? '', 'none', 'Failed', 0);
      logger.warn(
        { policy: need?.policy, generation: need?.generation, message: state.message },
        'policy generation cannot load',
      );
    }
    for (const need of plan.start) this.#load(need, false);
    for (const need of plan.retry) this.#load(need, true);
    this.#reconciled = true;
    // After the microtasks: an inline policy compiles at once, so its first report says
    // Loaded or Failed instead of a Loading that would cost one more patch.
    setImmediate(() => this.#options.publish(this.report()));
    clearTimeout(this.#retryTimer);
    const next = nextRetryAt(this.#states);
    if (next !== undefined) {
      this.#retryTimer = setTimeout(() => this.#schedule(), Math.max(0, next - Date.now()));
      this.#retryTimer.unref();
    }
  }

  /**
   * Loads one need. A first load reports Loading; a background retry of a failed download
   * keeps reporting Failed until it succeeds, so retries do not make the status flap.
   */
  #load(need: Need, background: boolean): void {
    const { logger, metrics } = this.#options;
    const controller = new AbortController();
    const previous = this.#states.get(need.key);
    const attempts = previous?.state === 'Failed' ? (previous.attempts ?? 0) : 0;
    this.#inflight.get(need.key)?.abort();
    this.#inflight.set(need.key, controller);
    if (background && previous?.state === 'Failed')
      this.#states.set(need.key, { ...previous, retryAt: undefined }); // in flight
    else this.#states.set(need.key, { state: 'Loading', since: Date.now() });
    const started = performance.now();
    const where = { policy: need.policy, generation: need.generation, origin: need.origin };
    logger.info({ ...where, attempt: attempts + 1 }, background ? 'retrying the load' : 'loading');
    void loadNeed(need, { ...this.#options.load, signal: controller.signal })
      .then((outcome) => {
        if (this.#inflight.get(need.key) !== controller) return; // dropped or replaced meanwhile
        this.#inflight.delete(need.key);
        const seconds = (performance.now() - started) / 1000;
        // A generation counts as one load failure, however often its download is retried.
        if (!background || outcome.state === 'Loaded')
          metrics?.loaded(need.policy, outcome.source, outcome.state, seconds);
        if (outcome.state === 'Loaded') {
          this.#states.set(need.key, {
            state: 'Loaded',
            spec: outcome.spec,
            code: outcome.code,
            loadedAt: Date.now(),
          });
          logger.info({ ...where, ms: Math.round(seconds * 1000) }, 'loaded');
        } else {
          const failed: LoadState = { state: 'Failed', message: outcome.message };
          if (outcome.transient) {
            failed.attempts = attempts + 1;
            failed.retryAt = Date.now() + backoffDelay(failed.attempts, downloadRetry);
          }
          this.#states.set(need.key, failed);
          logger.warn(
            {
              ...where,
              message: outcome.message,
              retryInMs: failed.retryAt && failed.retryAt - Date.now(),
            },
            'failed to load',
          );
        }
        this.#schedule();
      })
      // loadNeed never rejects; this guards the bookkeeping above, so nothing a policy does
      // can end the process with an unhandled rejection.
      .catch((err: unknown) => logger.error({ err, ...where }, 'load bookkeeping failed'));
  }
}
