// evaluatePolicy: ValidatingAdmissionPolicy semantics on one admission request. Synchronous and
// pure; a cost budget bounds it (meter.ts), and the policy server adds a deadline in its threads.
import type { CompiledExpression, CompiledPolicy, CompiledValidation } from './compile.ts';
import { describeCelError, EvaluationError } from './errors.ts';
import { Activation } from './activation.ts';
import { REQUEST_COST_BUDGET } from './budget.ts';
import { charge, CostLimitExceeded, exceededBudget, metered } from './meter.ts';

export interface AdmissionInput {
  /** AdmissionReview.request, as parsed JSON. */
  request: unknown;
  /** The policy's settings, exposed as `params` (null when none). */
  params: unknown;
  /** The request's Namespace object (null for cluster-scoped objects). */
  namespaceObject?: unknown;
}

export interface Verdict {
  allowed: boolean;
  message?: string;
  reason?: string;
  code?: number;
  warnings?: string[];
  /** Cost units the evaluation used (meter.ts). */
  cost: number;
  /** A matchCondition excluded the request: allowed without validating (the audit's `skip`). */
  skipped?: true;
}

export interface EvaluateOptions {
  /**
   * With 'Ignore', an expression that fails is skipped as the apiserver does (a later false
   * validation still denies; a failed match condition skips the policy). With 'Fail' (the
   * default) the first failure throws EvaluationError, and the caller denies.
   */
  failurePolicy?: 'Fail' | 'Ignore';
  /**
   * Cost units all the expressions of this request may use together (default
   * REQUEST_COST_BUDGET). Past it, CostLimitExceeded ends the evaluation whatever the
   * failurePolicy: skipping the expression would let a policy run past any budget.
   */
  budget?: number;
}

/** VAP's limit on a messageExpression's result. */
const MAX_MESSAGE_LENGTH = 5120;

type Context = Record<string, unknown>;

function run(expression: CompiledExpression, context: Context): unknown {
  let value: unknown;
  try {
    charge(1); // the root: the library runs only the nodes below it through the meter
    value = expression.program(context);
  } catch (error) {
    if (error instanceof CostLimitExceeded) throw error;
    throw new EvaluationError(
      `expression '${expression.source}' resulted in error: ${describeCelError(error)}`,
      expression.fieldPath,
      { cause: error },
    );
  }
  // The library catches errors inside `||`, `&&` and `exists`: an overrun must not pass as a value.
  const overrun = exceededBudget();
  if (overrun) throw overrun;
  return value;
}

function runBool(expression: CompiledExpression, context: Context): boolean {
  const value = run(expression, context);
  if (typeof value !== 'boolean') {
    throw new EvaluationError(
      `expression '${expression.source}' resulted in error: must evaluate to bool, got ${value === null ? 'null' : typeof value}`,
      expression.fieldPath,
    );
  }
  return value;
}

/** The denial message: messageExpression if it gives a usable string, else message, else VAP's default. */
function denialMessage(validation: CompiledValidation, context: Context): string {
  if (validation.messageExpression) {
    try {
      const value = run(validation.messageExpression, context);
      if (
        typeof value === 'string' &&
        value.trim() !== '' &&
        !value.includes('\n') &&
        value.length <= MAX_MESSAGE_LENGTH
      ) {
        return value;
      }
    } catch (error) {
      if (error instanceof CostLimitExceeded) throw error;
      // The apiserver falls back to the static message when messageExpression fails.
    }
  }
  if (validation.message !== undefined && validation.message !== '') return validation.message;
  return `failed expression: ${validation.expression.source.trim()}`;
}

/**
 * Evaluates a compiled policy on one request, as a ValidatingAdmissionPolicy with
 * validationActions [Deny] would: match conditions first (any false: allowed without
 * validating), then validations in order; the first that is false denies with its message and
 * reason. Throws EvaluationError when an expression fails (see EvaluateOptions), and
 * CostLimitExceeded when the request's expressions together run past the budget.
 */
export function evaluatePolicy(
  policy: CompiledPolicy,
  input: AdmissionInput,
  options: EvaluateOptions = {},
): Verdict {
  const ignoreErrors = options.failurePolicy === 'Ignore';
  const { value, cost } = metered(options.budget ?? REQUEST_COST_BUDGET, () =>
    decide(policy, input, ignoreErrors),
  );
  return { ...value, cost };
}

/** evaluatePolicy's verdict, under the meter it runs. */
function decide(
  policy: CompiledPolicy,
  input: AdmissionInput,
  ignoreErrors: boolean,
): Omit<Verdict, 'cost'> {
  const context = new Activation(policy, input) as unknown as Context;

  // A false match condition wins over a failed one (the apiserver evaluates them all).
  let conditionError: EvaluationError | undefined;
  for (const condition of policy.matchConditions) {
    try {
      if (!runBool(condition.expression, context)) return { allowed: true, skipped: true };
    } catch (error) {
      if (error instanceof CostLimitExceeded) throw error;
      conditionError ??= error as EvaluationError;
    }
  }
  if (conditionError) {
    if (ignoreErrors) return { allowed: true };
    throw conditionError;
  }

  for (const validation of policy.validations) {
    let passed: boolean;
    try {
      passed = runBool(validation.expression, context);
    } catch (error) {
      if (ignoreErrors && !(error instanceof CostLimitExceeded)) continue;
      throw error;
    }
    if (!passed) {
      return {
        allowed: false,
        message: denialMessage(validation, context),
        reason: validation.reason,
        code: validation.code,
      };
    }
  }
  return { allowed: true };
}
