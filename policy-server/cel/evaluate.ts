// evaluatePolicy: ValidatingAdmissionPolicy semantics on one admission request. Synchronous and
// pure; the policy server bounds its time (a worker with a deadline, then failurePolicy).
import type { CompiledExpression, CompiledPolicy, CompiledValidation } from './compile.ts';
import { describeCelError, EvaluationError } from './errors.ts';
import { Activation } from './activation.ts';

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
}

export interface EvaluateOptions {
  /**
   * With 'Ignore', an expression that fails is skipped as the apiserver does (a later false
   * validation still denies; a failed match condition skips the policy). With 'Fail' (the
   * default) the first failure throws EvaluationError, and the caller denies.
   */
  failurePolicy?: 'Fail' | 'Ignore';
}

/** VAP's limit on a messageExpression's result. */
const MAX_MESSAGE_LENGTH = 5120;

type Context = Record<string, unknown>;

function run(expression: CompiledExpression, context: Context): unknown {
  try {
    return expression.program(context);
  } catch (error) {
    throw new EvaluationError(
      `expression '${expression.source}' resulted in error: ${describeCelError(error)}`,
      expression.fieldPath,
      { cause: error },
    );
  }
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
    } catch {
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
 * reason. Throws EvaluationError when an expression fails (see EvaluateOptions).
 */
export function evaluatePolicy(
  policy: CompiledPolicy,
  input: AdmissionInput,
  options: EvaluateOptions = {},
): Verdict {
  const ignoreErrors = options.failurePolicy === 'Ignore';
  const context = new Activation(policy, input) as unknown as Context;

  // A false match condition wins over a failed one (the apiserver evaluates them all).
  let conditionError: EvaluationError | undefined;
  for (const condition of policy.matchConditions) {
    try {
      if (!runBool(condition.expression, context)) return { allowed: true };
    } catch (error) {
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
      if (ignoreErrors) continue;
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
