/**
 * `POST /audit`: judges existing objects for the control plane's continuous audit (api/audit.ts).
 * Each object × Policy pair becomes the AdmissionReview a CREATE of the object would send
 * (dry run, by user `rollcall:audit`) and goes through admission's own `judge`, at the
 * generation the batch names: the audit cannot judge differently from the webhook.
 *
 * Admission comes first. A replica judges one batch at a time (AuditQueue: a few wait, more
 * are refused with 503), its pairs one after the other, yielding the event loop after each; a
 * pair is judged only while admission leaves room (`enter`), and a batch stops after its time
 * budget. What is not judged is answered `retry`, and the worker asks again later.
 */
import { setImmediate as yieldLoop } from 'node:timers/promises';
import {
  auditRequestSchema,
  type AuditRequest,
  type AuditResponse,
  type AuditVerdict,
} from '../api/audit.ts';
import { judge, type AdmissionDeps } from './admission.ts';
import { clip } from './lifecycle.ts';
import { problemOf, type Outcome, type PolicyAnswerContext } from './verdict.ts';

/** The time one batch may take by default; the pairs left then are answered `retry`. */
export const AUDIT_BATCH_BUDGET_MS = 10_000;
/** The user an audit's dry-run CREATE is made by (a policy reading userInfo sees it). */
export const AUDIT_USERNAME = 'rollcall:audit';

export interface AuditDeps {
  admission: AdmissionDeps;
  /**
   * An in-flight slot for one evaluation of `policy`, or why this replica has no room for the
   * audit now (it is busy with admission): then the batch stops and the rest is `retry`.
   */
  enter(policy: string): { release(): void } | { overloaded: string };
  /** Counts one evaluation of `policy` (rollcall_policy_server_audit_evaluations_total). */
  evaluated(policy: string): void;
  /** Default AUDIT_BATCH_BUDGET_MS. */
  budgetMs?: number;
  /** Milliseconds, for the budget (default performance.now). */
  now?(): number;
}

export interface AuditAnswer {
  status: number;
  body: AuditResponse | { error: string };
}

/** A batch as read: its request, and each object's own JSON (sent to the policy as it came). */
export type ReadBatch =
  { ok: true; request: AuditRequest; objects: string[] } | { ok: false; error: string };

/**
 * Reads an audit batch body, or says what is wrong with it: not JSON, not the schema, an
 * item naming a policy index past `policies` or one index twice (so the pairs of a batch stay
 * at most items × policies).
 */
export function readBatch(body: string): ReadBatch {
  let json: unknown;
  try {
    json = JSON.parse(body);
  } catch {
    return { ok: false, error: 'the audit batch is not JSON' };
  }
  const parsed = auditRequestSchema.safeParse(json);
  if (!parsed.success) {
    const issues = parsed.error.issues.slice(0, 3).map(describeIssue);
    return { ok: false, error: `not an audit batch: ${issues.join('; ')}` };
  }
  const request = parsed.data;
  const count = request.policies.length;
  for (const [i, item] of request.items.entries()) {
    const past = item.policies.find((p) => p >= count);
    if (past !== undefined)
      return {
        ok: false,
        error: `items[${i}].policies: index ${past} is past the batch's ${count} policies`,
      };
    if (new Set(item.policies).size !== item.policies.length)
      return { ok: false, error: `items[${i}].policies: an index appears twice` };
  }
  // The objects as sent (the schema's copy may differ, e.g. in a `__proto__` key).
  const raw = (json as { items: { object: unknown }[] }).items;
  return { ok: true, request, objects: raw.map((item) => JSON.stringify(item.object)) };
}

const describeIssue = (i: { path: PropertyKey[]; message: string }) =>
  `${i.path.map(String).join('.') || '(the batch)'}: ${i.message}`;

/** Answers one audit batch body. Never throws: a bad batch is a 400 saying what is wrong. */
export async function auditBatch(body: string, deps: AuditDeps): Promise<AuditAnswer> {
  const batch = readBatch(body);
  if (!batch.ok) return { status: 400, body: { error: batch.error } };
  const { request, objects } = batch;
  const now = deps.now ?? (() => performance.now());
  const budget = deps.budgetMs ?? AUDIT_BATCH_BUDGET_MS;
  const deadline = now() + budget;
  // Set once the batch stops: every pair left is answered `retry` with it.
  let stopped: string | undefined;
  let n = 0;
  const results: AuditVerdict[][] = [];
  for (const [i, item] of request.items.entries()) {
    const verdicts: AuditVerdict[] = [];
    for (const index of item.policies) {
      const { name, generation } = request.policies[index]!;
      if (stopped === undefined && now() >= deadline)
        stopped = `the batch ran past this replica's audit budget (${budget} ms): judged later`;
      const slot = stopped === undefined ? deps.enter(name) : { overloaded: stopped };
      if ('overloaded' in slot) {
        stopped = slot.overloaded;
        verdicts.push({ result: 'error', message: stopped, retry: true });
        continue;
      }
      const review = reviewOf(request, item.object.metadata, objects[i]!, n++);
      verdicts.push(await judgePair(review, name, generation, slot, deps));
      // Admission requests that arrived meanwhile go first.
      await yieldLoop();
    }
    results.push(verdicts);
  }
  return { status: 200, body: { results } };
}

/**
 * The AdmissionReview text of a dry-run CREATE of an object (`object`: its JSON), with a uid
 * per pair (`n`), as the apiserver would send it for the batch's resource.
 */
export function reviewOf(
  request: Pick<AuditRequest, 'kind' | 'resource'>,
  metadata: { name: string; namespace?: string | undefined },
  object: string,
  n: number,
): string {
  const head = JSON.stringify({
    uid: `rollcall-audit-${n}`,
    kind: request.kind,
    resource: request.resource,
    requestKind: request.kind,
    requestResource: request.resource,
    name: metadata.name,
    ...(metadata.namespace !== undefined && { namespace: metadata.namespace }),
    operation: 'CREATE',
    userInfo: { username: AUDIT_USERNAME },
    oldObject: null,
    dryRun: true,
    options: { apiVersion: 'meta.k8s.io/v1', kind: 'CreateOptions' },
  });
  // The object is spliced in as text: it was parsed once already, and may be large.
  return `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":${head.slice(0, -1)},"object":${object}}}`;
}

async function judgePair(
  review: string,
  policy: string,
  generation: number,
  slot: { release(): void },
  deps: AuditDeps,
): Promise<AuditVerdict> {
  let judged: Awaited<ReturnType<typeof judge>>;
  try {
    judged = await judge(review, policy, generation, deps.admission);
  } catch (err) {
    // judge never throws; if it did, one pair errs rather than the batch.
    return { result: 'error', message: clip(`the evaluation failed: ${String(err)}`) };
  } finally {
    slot.release();
  }
  if ('refused' in judged) {
    const message = clip(errorOf(judged.refused.body));
    // 404: the policy is not (yet) assigned here; this replica's watch may lag the worker's.
    return judged.refused.status === 404
      ? { result: 'error', message, retry: true }
      : { result: 'error', message };
  }
  if (judged.outcome.kind !== 'unavailable') deps.evaluated(policy);
  return verdictOf(judged.ctx, judged.outcome);
}

const errorOf = (body: unknown) =>
  typeof body === 'object' && body !== null && 'error' in body ? String(body.error) : 'refused';

/**
 * The OpenReports result of one judged pair: `skip` when a match condition excluded the
 * object, `pass`, `fail` for a failed validation of a Policy that denies or audits, `warn` of
 * one that only warns, `error` when the evaluation gave no verdict (and `retry` when it was
 * not run because this replica has not loaded the generation).
 */
export function verdictOf(ctx: PolicyAnswerContext, outcome: Outcome): AuditVerdict {
  if (outcome.kind === 'unavailable')
    return { result: 'error', message: clip(problemOf(ctx, outcome)), retry: true };
  if (outcome.kind !== 'verdict')
    return { result: 'error', message: clip(problemOf(ctx, outcome)) };
  const v = outcome.verdict;
  if (v.skipped) return { result: 'skip' };
  if (v.allowed) return { result: 'pass' };
  const message = v.message ?? `denied by policy ${ctx.policy} generation ${ctx.generation}`;
  const enforced = ctx.actions.includes('Deny') || ctx.actions.includes('Audit');
  return { result: enforced ? 'fail' : 'warn', message: clip(message) };
}

/**
 * Audit batches of one replica: one is judged at a time, up to `maxWaiting` wait their turn,
 * and one more is refused at once (the worker retries it with backoff). Audit evaluations
 * stay few, so admission keeps the replica's threads and event loop.
 */
export class AuditQueue {
  readonly #maxWaiting: number;
  #running = false;
  readonly #waiting: (() => void)[] = [];

  constructor(maxWaiting = 4) {
    this.#maxWaiting = maxWaiting;
  }

  /** Whether a batch arriving now would be refused. */
  get full(): boolean {
    return this.#running && this.#waiting.length >= this.#maxWaiting;
  }

  /** Runs `work` after the batches before it; undefined at once when the queue is full. */
  async run<T>(work: () => Promise<T>): Promise<T | undefined> {
    if (this.full) return undefined;
    if (this.#running) await new Promise<void>((turn) => this.#waiting.push(turn));
    this.#running = true;
    try {
      return await work();
    } finally {
      const next = this.#waiting.shift();
      if (next) next();
      else this.#running = false;
    }
  }
}
