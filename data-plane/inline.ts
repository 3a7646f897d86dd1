/**
 * Evaluation on the main thread, for a policy generation whose cost is bounded (costBound:
 * linear in the request with a small constant) and a small request. It saves the two thread
 * wake-ups and the copy of each request to a pool thread (bench/RESULTS.md), and needs no
 * deadline: it runs under a small cost budget, so it cannot stall the process; a request that
 * needs more goes to the pool, and so does its generation from then on. Everything else goes
 * to the pool.
 */
import { formatCost } from './cel/budget.ts';
import { compilePolicy, costBound, evaluatePolicy, type CostBound } from './cel/index.ts';
import { answerReview, keepPolicy, type Engine, type KeptPolicy } from './evaluation.ts';
import type { PoolJob, PoolOutcome } from './pool.ts';

/** The default of InlineOptions.maxBodyBytes. */
export const INLINE_MAX_BODY_BYTES = 32 * 1024;

/**
 * The default of InlineOptions.costBudget: cost units one request may use on the main thread.
 * The slowest units measured (formatting doubles, comparing map literals, ~50 ns each on the
 * 2-core bench machine) spend 10^5 in ~5 ms (~10 ms at the 99th percentile, young-generation
 * GC included); most run at 20-30 ns. The bench policy uses ~100 per request.
 */
export const INLINE_COST_BUDGET = 100_000;

export interface InlineOptions {
  /**
   * The largest AdmissionReview (bytes of its body, plus the Namespace's JSON when the policy
   * reads it) evaluated on the main thread; larger ones go to the pool, and so does a
   * generation whose settings are larger. Default 32 KiB: parsing and evaluating the bench
   * policy cost ~0.04 ms per KiB, ~1.3 ms here. 0: every request goes to the pool.
   */
  maxBodyBytes?: number;
  /**
   * Cost units one request may use here (default INLINE_COST_BUDGET). A request past it is
   * answered by the pool (under the full budget and a deadline), and so is every later request
   * of its generation.
   */
  costBudget?: number;
  /**
   * Told once per generation, when it is first asked for, whether it is bounded and why not;
   * told again, not bounded, when a request of a bounded generation runs past the cost budget.
   */
  onClassified?(key: string, bound: CostBound): void;
}

/** A generation as kept here: compiled when bounded, only the verdict otherwise. */
type Kept = { bounded: true; policy: KeptPolicy } | { bounded: false };

/** Generations kept at most (as a pool thread); past it, all are forgotten and compiled anew. */
const KEPT_MAX = 256;

const engine: Engine = { compilePolicy, evaluatePolicy };

export class InlineEvaluator {
  readonly #maxBodyBytes: number;
  readonly #costBudget: number;
  readonly #options: InlineOptions;
  readonly #kept = new Map<string, Kept>();

  constructor(options: InlineOptions = {}) {
    this.#options = options;
    this.#maxBodyBytes = Math.max(0, options.maxBodyBytes ?? INLINE_MAX_BODY_BYTES);
    this.#costBudget = options.costBudget ?? INLINE_COST_BUDGET;
  }

  /**
   * The outcome of `job` evaluated here, or undefined when it belongs in the pool: its
   * generation is not bounded (or does not compile), the review is too large, or it ran past
   * the cost budget here.
   */
  evaluate(job: PoolJob): PoolOutcome | undefined {
    const max = this.#maxBodyBytes;
    if (max === 0) return undefined;
    // The Namespace is input too. Bytes are at least the text's length: the exact count only
    // when it could pass.
    const { review, namespace } = job;
    if (review.length + (namespace?.length ?? 0) > max) return undefined;
    const kept = this.#keep(job);
    if (!kept.bounded) return undefined;
    const bytes = (text: string | null) => (text === null ? 0 : Buffer.byteLength(text, 'utf8'));
    if (bytes(review) + bytes(namespace) > max) return undefined;
    const answer = answerReview(engine, job.key, kept.policy, review, namespace, this.#costBudget);
    if (answer.kind !== 'cost') return answer;
    // What one request of this generation may cost is more than the main thread may block.
    const reason = `a request ran past the inline cost budget ${formatCost(this.#costBudget)}`;
    this.#kept.set(job.key, { bounded: false });
    this.#options.onClassified?.(job.key, { bounded: false, reason });
    return undefined;
  }

  #keep(job: PoolJob): Kept {
    let kept = this.#kept.get(job.key);
    if (kept) return kept;
    const policy = keepPolicy(engine, job.policy);
    if (this.#kept.size >= KEPT_MAX) this.#kept.clear();
    const bound = this.#bound(policy);
    this.#kept.set(
      job.key,
      (kept = bound.bounded ? { bounded: true, policy } : { bounded: false }),
    );
    this.#options.onClassified?.(job.key, bound);
    return kept;
  }

  #bound(policy: KeptPolicy): CostBound {
    // A generation that does not compile is answered by the pool, which says so the same way.
    if ('problem' in policy) return { bounded: false, reason: policy.problem };
    // Settings are read on every request (a comprehension over them is linear in them).
    const settings = Buffer.byteLength(JSON.stringify(policy.params ?? null), 'utf8');
    if (settings > this.#maxBodyBytes)
      return { bounded: false, reason: `its settings take ${settings} bytes, more than the limit` };
    try {
      return costBound(policy.compiled as Parameters<typeof costBound>[0]);
    } catch (err) {
      return { bounded: false, reason: `the cost analysis failed: ${String(err)}` }; // a bug
    }
  }
}
