/**
 * One request through one loaded Policy, as the policy server answers it: whether the webhook
 * would send it (match.ts), then the server's own evaluation (`answerReview` of
 * data-plane/evaluation.ts, the function both of its paths call) and answer
 * (`admissionResponse` of data-plane/verdict.ts: validationActions, failurePolicy, reasons and
 * codes).
 *
 * Which expressions ran is observed, not re-derived: each compiled expression's program is
 * wrapped so that every call the engine makes (match conditions, variables when first read,
 * validations, message expressions) is recorded with its result or error, in the order the
 * engine finished them.
 */
import { actionsOf } from '../../api/v1alpha1.ts';
import type { CompiledPolicy } from '../../data-plane/cel/index.ts';
import { answerReview, type Answer, type KeptPolicy } from '../../data-plane/evaluation.ts';
import {
  admissionResponse,
  type AdmissionResponse,
  type Outcome,
} from '../../data-plane/verdict.ts';
import { admissionMatch, labelsOf, type MatchResult, type RequestAttributes } from './match.ts';
import { ENGINE, type LoadedPolicy } from './policies.ts';

/** One expression the engine ran. */
export interface TraceEntry {
  /** e.g. `spec.validations[0].expression`, `spec.variables[1].expression`. */
  fieldPath: string;
  expression: string;
  /** The value it gave, as CEL text, or why it failed. */
  result: { value: string } | { error: string };
}

/**
 * The result as a test states it: `pass` (the policy allows), `fail` (it denies, or would deny
 * and its validationActions warn or audit instead), `skip` (it does not apply: the webhook would not send the request, or a
 * match condition is false), `error` (an expression failed at run time and failurePolicy Fail
 * denied).
 */
export type Result = 'pass' | 'fail' | 'skip' | 'error';

export interface Evaluation {
  result: Result;
  match: MatchResult;
  /** Why the policy was skipped (match), the denial or error message; '' when it passes. */
  message: string;
  /** The server's answer; absent when the webhook would not send the request. */
  response?: AdmissionResponse;
  warnings: string[];
  /** The response's audit annotations (the Audit action's `validation_failure`), unprefixed. */
  auditAnnotations: Record<string, string>;
  trace: TraceEntry[];
  /** Cost units the runtime meter counted, when the engine has one. */
  cost?: number;
  /** What could not be checked offline. */
  notes: string[];
}

export interface EvaluationInput {
  request: Record<string, unknown> & { uid: string };
  attributes: RequestAttributes;
  /** The request's Namespace (null: cluster-scoped). */
  namespaceObject: Record<string, unknown> | null;
  /** The Namespace's labels are really known (else the namespaceSelector is not checked). */
  namespaceKnown: boolean;
  /** What building the request could not know (a guessed resource), for the report. */
  notes?: string[];
}

/** Where the wrapped programs of each compiled policy record their calls. */
const sinks = new WeakMap<CompiledPolicy, { entries: TraceEntry[] }>();

const MAX_VALUE_CHARS = 160;

/** A CEL value as CEL-like text: ints without quotes, strings quoted, maps and lists. */
export function celText(value: unknown): string {
  const seen = new Set<unknown>();
  const text = (v: unknown): string => {
    if (v === null || v === undefined) return 'null';
    if (typeof v === 'bigint') return String(v);
    if (typeof v === 'number') return Number.isInteger(v) ? `${v}.0` : String(v);
    if (typeof v === 'string') return JSON.stringify(v);
    if (typeof v === 'boolean') return String(v);
    if (typeof v !== 'object') return String(v);
    if (seen.has(v)) return '…';
    seen.add(v);
    if (Array.isArray(v)) return `[${v.map(text).join(', ')}]`;
    if (v instanceof Map)
      return `{${[...v].map(([k, item]) => `${text(k)}: ${text(item)}`).join(', ')}}`;
    if (v instanceof Date) return `timestamp(${JSON.stringify(v.toISOString())})`;
    if (Object.getPrototypeOf(v) === Object.prototype || Object.getPrototypeOf(v) === null)
      return `{${Object.entries(v)
        .map(([k, item]) => `${JSON.stringify(k)}: ${text(item)}`)
        .join(', ')}}`;
    const own = String(v);
    return own === '[object Object]' ? (v.constructor?.name ?? 'object') : own;
  };
  const all = text(value);
  return all.length <= MAX_VALUE_CHARS ? all : `${all.slice(0, MAX_VALUE_CHARS - 1)}…`;
}

const errorText = (error: unknown) =>
  error instanceof Error ? error.message.split('\n')[0] || error.name : String(error);

/** Wraps every program of `policy` once so that its calls are recorded. */
function traced(policy: CompiledPolicy): { entries: TraceEntry[] } {
  const known = sinks.get(policy);
  if (known) return known;
  const created = { entries: [] as TraceEntry[] };
  sinks.set(policy, created);
  type Expression = CompiledPolicy['validations'][number]['expression'];
  const wrap = (expression: Expression) => {
    const { fieldPath, source } = expression;
    expression.program = new Proxy(expression.program, {
      apply(target, thisArg, args) {
        let value: unknown;
        try {
          value = Reflect.apply(target, thisArg, args);
        } catch (error) {
          created.entries.push({
            fieldPath,
            expression: source,
            result: { error: errorText(error) },
          });
          throw error;
        }
        created.entries.push({ fieldPath, expression: source, result: { value: celText(value) } });
        return value;
      },
    });
  };
  for (const { expression } of [...policy.variables, ...policy.matchConditions]) wrap(expression);
  for (const v of policy.validations) {
    wrap(v.expression);
    if (v.messageExpression) wrap(v.messageExpression);
  }
  return created;
}

/** Evaluates one request with `policy`, as the policy server answers it. */
export function evaluateRequest(policy: LoadedPolicy, input: EvaluationInput): Evaluation {
  const { spec } = policy;
  const notes: string[] = [...(input.notes ?? [])];
  const namespaceLabels =
    input.namespaceKnown && input.namespaceObject ? labelsOf(input.namespaceObject) : undefined;
  const match = admissionMatch(spec, input.attributes, { namespaceLabels });
  const base = { match, warnings: [], auditAnnotations: {}, trace: [], notes };
  if (!match.matched) return { ...base, result: 'skip', message: match.reason };
  notes.push(...match.notes);

  const sink = traced(policy.kept.compiled);
  sink.entries = [];
  const kept: KeptPolicy = policy.kept;
  const review = JSON.stringify({
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: input.request,
  });
  const namespace = input.namespaceObject ? JSON.stringify(input.namespaceObject) : null;
  const answer: Answer = answerReview(ENGINE, policy.name, kept, review, namespace);
  const trace = sink.entries;
  sink.entries = [];
  if (answer.kind === 'invalid') throw new Error(`the request is not usable: ${answer.message}`);

  const outcome: Outcome =
    answer.kind === 'verdict'
      ? { kind: 'verdict', verdict: answer.verdict }
      : answer.kind === 'cost'
        ? { kind: 'cost', budget: answer.budget, used: answer.used }
        : { kind: 'error', message: answer.message };
  const { response } = admissionResponse(
    input.request.uid,
    {
      policy: policy.name,
      generation: policy.generation,
      actions: actionsOf(spec),
      failurePolicy: spec.failurePolicy,
    },
    outcome,
  );
  const cost =
    answer.kind === 'verdict'
      ? answer.verdict.cost
      : answer.kind === 'cost'
        ? answer.used
        : undefined;
  const common = {
    ...base,
    response,
    warnings: response.warnings ?? [],
    auditAnnotations: response.auditAnnotations ?? {},
    trace,
    ...(cost !== undefined ? { cost } : {}),
  };

  // A false match condition: allowed without validating, i.e. the policy does not apply.
  if (answer.kind === 'verdict' && answer.verdict.skipped) {
    const falseCondition = policy.kept.compiled.matchConditions.find((c) =>
      trace.some(
        (t) =>
          t.fieldPath === c.expression.fieldPath &&
          'value' in t.result &&
          t.result.value === 'false',
      ),
    );
    return {
      ...common,
      result: 'skip',
      message: `match condition ${falseCondition?.name ?? '(unknown)'} is false`,
    };
  }
  if (answer.kind !== 'verdict') {
    // The engine throws only under failurePolicy Fail (with Ignore it skips what failed), and
    // past its cost budget whatever the failurePolicy: the server denies, or allows with the
    // problem as a warning (failurePolicy Ignore), or the validationActions say what happens.
    const said = response.status?.message ?? response.warnings?.at(-1) ?? '';
    return { ...common, result: 'error', message: said };
  }
  if (answer.verdict.allowed) return { ...common, result: 'pass', message: '' };
  return {
    ...common,
    result: 'fail',
    message: answer.verdict.message ?? response.status?.message ?? '',
  };
}
