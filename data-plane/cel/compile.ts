// compilePolicy: parse and type-check every expression of a policy once, at load time, so a
// typo fails the load with its field path and position instead of failing requests later.
import type { Environment, ParseResult } from '@marcbachmann/cel-js';
import { fieldType, policyEnvironment } from './environment.ts';
import { describeCompileError, position } from './errors.ts';
import { instrument } from './meter.ts';
import { scan } from './unsupported.ts';

export interface Validation {
  expression: string;
  message?: string;
  messageExpression?: string;
  reason?: string;
}
export interface Variable {
  name: string;
  expression: string;
}
export interface MatchCondition {
  name: string;
  expression: string;
}
export interface PolicyCode {
  validations: Validation[];
  variables?: Variable[];
  matchConditions?: MatchCondition[];
}

/**
 * What is wrong with the shape of untrusted policy code (a source bundle, a spec read as JSON),
 * by field path. Hand-written rather than zod: zod's import adds ~0.5 s to the start of every
 * evaluation thread, and a thread is replaced after each timeout.
 */
function shapeErrors(code: unknown, path: string): string[] {
  const errors: string[] = [];
  const describe = (v: unknown) => (v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v);
  const expect = (v: unknown, type: 'string' | 'object', at: string): boolean => {
    const ok = type === 'object' ? describe(v) === 'object' : typeof v === type;
    if (!ok) errors.push(`${at}: Invalid input: expected ${type}, received ${describe(v)}`);
    return ok;
  };
  const list = (
    v: unknown,
    at: string,
    item: (entry: Record<string, unknown>, at: string) => void,
  ) => {
    if (!Array.isArray(v)) {
      errors.push(`${at}: Invalid input: expected array, received ${describe(v)}`);
      return;
    }
    v.forEach((entry, i) => {
      if (expect(entry, 'object', `${at}[${i}]`))
        item(entry as Record<string, unknown>, `${at}[${i}]`);
    });
  };
  if (!expect(code, 'object', path)) return errors;
  const c = code as Record<string, unknown>;
  list(c.validations, `${path}.validations`, (v, at) => {
    expect(v.expression, 'string', `${at}.expression`);
    for (const key of ['message', 'messageExpression', 'reason'] as const) {
      if (v[key] !== undefined) expect(v[key], 'string', `${at}.${key}`);
    }
  });
  for (const key of ['variables', 'matchConditions'] as const) {
    if (c[key] === undefined) continue;
    list(c[key], `${path}.${key}`, (v, at) => {
      expect(v.name, 'string', `${at}.name`);
      expect(v.expression, 'string', `${at}.expression`);
    });
  }
  return errors;
}

/** HTTP codes of the reasons a validation may give (VAP's set). */
export const REASON_CODES: Readonly<Record<string, number>> = {
  Unauthorized: 401,
  Forbidden: 403,
  Invalid: 422,
  RequestEntityTooLarge: 413,
};

export interface CompiledExpression {
  /** The expression as written. */
  source: string;
  /** Where it is in the policy, e.g. `spec.validations[0].expression`. */
  fieldPath: string;
  program: ParseResult;
}

export interface CompiledValidation {
  expression: CompiledExpression;
  message?: string;
  messageExpression?: CompiledExpression;
  reason: string;
  code: number;
}

/** Where a request's `variables` get their values (its activation, which caches them). */
export interface VariableSource {
  variable(name: string): unknown;
}

/** Where LazyVariables keeps its source: a symbol, so no variable name can shadow it. */
const SOURCE = Symbol('source');

/** The lazily evaluated `variables` of one request; subclassed per policy with a getter per name. */
export class LazyVariables {
  readonly [SOURCE]: VariableSource;
  constructor(source: VariableSource) {
    this[SOURCE] = source;
  }
}

export interface CompiledPolicy {
  matchConditions: { name: string; expression: CompiledExpression }[];
  variables: { name: string; expression: CompiledExpression }[];
  validations: CompiledValidation[];
  /** The class of `variables` values for this policy's environments. */
  Variables: new (source: VariableSource) => LazyVariables;
}

/** What a request evaluates after the variables: match conditions, then each validation and its messageExpression. */
export function requestExpressions(policy: CompiledPolicy): CompiledExpression[] {
  return [
    ...policy.matchConditions.map((c) => c.expression),
    ...policy.validations.flatMap((v) =>
      v.messageExpression ? [v.expression, v.messageExpression] : [v.expression],
    ),
  ];
}

/** Every expression of a policy in evaluation order: the variables as declared, then requestExpressions. */
export function policyExpressions(policy: CompiledPolicy): CompiledExpression[] {
  return [...policy.variables.map((v) => v.expression), ...requestExpressions(policy)];
}

export type CompileResult = { ok: true; policy: CompiledPolicy } | { ok: false; errors: string[] };

/** At most this many errors are listed; an operator fixes the first ones first. */
const MAX_ERRORS = 10;
const IDENTIFIER = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
/** Names the CEL library reads on every object to tell its type. */
const RESERVED_NAMES = new Set(['constructor', '__proto__']);

function variablesClass(names: readonly string[]): CompiledPolicy['Variables'] {
  const Variables = class extends LazyVariables {};
  for (const name of names) {
    Object.defineProperty(Variables.prototype, name, {
      get(this: LazyVariables) {
        return this[SOURCE].variable(name);
      },
    });
  }
  return Variables;
}

/** The type an expression must have (`bool` also takes dyn); `any` checks nothing. */
type Expect = 'bool' | 'string' | 'any';

/**
 * Compiles a policy: every expression is parsed and type-checked in VAP's environment
 * (`object`, `oldObject`, `request`, `params`, `namespaceObject`, `variables`). Errors read
 * `spec.validations[1].expression: undeclared reference to 'objekt' at 1:5`.
 */
export function compilePolicy(untrusted: PolicyCode, fieldPath = 'spec'): CompileResult {
  const malformed = shapeErrors(untrusted, fieldPath);
  if (malformed.length > 0) return { ok: false, errors: malformed.slice(0, MAX_ERRORS) };
  const code = untrusted;
  const errors: string[] = [];
  const names = (code.variables ?? []).map((v) => v.name);
  const Variables = variablesClass([
    ...new Set(names.filter((n) => IDENTIFIER.test(n) && !RESERVED_NAMES.has(n))),
  ]);
  const { fields, variables } = compileVariables(code, fieldPath, Variables, errors);
  const env = policyEnvironment(fields, Variables);
  const matchConditions = compileMatchConditions(code, fieldPath, env, errors);
  const validations = compileValidations(code, fieldPath, env, errors);

  if (errors.length > 0) {
    const shown = errors.slice(0, MAX_ERRORS);
    if (errors.length > MAX_ERRORS) shown.push(`... and ${errors.length - MAX_ERRORS} more errors`);
    return { ok: false, errors: shown };
  }
  return { ok: true, policy: { matchConditions, variables, validations, Variables } };
}

/**
 * The variables in declaration order, and the checked type of each: a variable sees the
 * variables declared before it, with their types.
 */
function compileVariables(
  code: PolicyCode,
  fieldPath: string,
  Variables: CompiledPolicy['Variables'],
  errors: string[],
): { fields: Record<string, string>; variables: CompiledPolicy['variables'] } {
  const fields: Record<string, string> = {};
  const variables: CompiledPolicy['variables'] = [];
  (code.variables ?? []).forEach((variable, i) => {
    const path = `${fieldPath}.variables[${i}]`;
    if (!IDENTIFIER.test(variable.name)) {
      errors.push(
        `${path}.name: Invalid value: ${JSON.stringify(variable.name)}: must be a CEL identifier`,
      );
      return;
    }
    if (RESERVED_NAMES.has(variable.name)) {
      errors.push(`${path}.name: Invalid value: ${JSON.stringify(variable.name)}: a reserved name`);
      return;
    }
    if (Object.hasOwn(fields, variable.name)) {
      errors.push(`${path}.name: Duplicate value: ${JSON.stringify(variable.name)}`);
      return;
    }
    const env = policyEnvironment(fields, Variables);
    const { compiled, type } = compileExpression(
      env,
      variable.expression,
      `${path}.expression`,
      'any',
      errors,
    );
    fields[variable.name] = fieldType(type);
    if (compiled) variables.push({ name: variable.name, expression: compiled });
  });
  return { fields, variables };
}

function compileMatchConditions(
  code: PolicyCode,
  fieldPath: string,
  env: Environment,
  errors: string[],
): CompiledPolicy['matchConditions'] {
  const matchConditions: CompiledPolicy['matchConditions'] = [];
  (code.matchConditions ?? []).forEach((condition, i) => {
    const path = `${fieldPath}.matchConditions[${i}].expression`;
    const { compiled } = compileExpression(env, condition.expression, path, 'bool', errors);
    if (compiled) matchConditions.push({ name: condition.name, expression: compiled });
  });
  return matchConditions;
}

function compileValidations(
  code: PolicyCode,
  fieldPath: string,
  env: Environment,
  errors: string[],
): CompiledValidation[] {
  const validations: CompiledValidation[] = [];
  if (!Array.isArray(code.validations) || code.validations.length === 0) {
    errors.push(`${fieldPath}.validations: Required value: at least one validation is required`);
  }
  (code.validations ?? []).forEach((validation, i) => {
    const path = `${fieldPath}.validations[${i}]`;
    const { compiled } = compileExpression(
      env,
      validation.expression,
      `${path}.expression`,
      'bool',
      errors,
    );
    let messageExpression: CompiledExpression | undefined;
    if (validation.messageExpression !== undefined) {
      messageExpression = compileExpression(
        env,
        validation.messageExpression,
        `${path}.messageExpression`,
        'string',
        errors,
      ).compiled;
    }
    const reason = validation.reason ?? 'Invalid';
    const statusCode = REASON_CODES[reason];
    if (statusCode === undefined) {
      errors.push(
        `${path}.reason: Unsupported value: ${JSON.stringify(reason)}: supported values: ${Object.keys(REASON_CODES).join(', ')}`,
      );
    }
    if (compiled && statusCode !== undefined) {
      validations.push({
        expression: compiled,
        ...(validation.message !== undefined && { message: validation.message }),
        ...(messageExpression && { messageExpression }),
        reason,
        code: statusCode,
      });
    }
  });
  return validations;
}

/**
 * One expression at `path`, parsed, scanned for what rollcall does not support, type-checked
 * and instrumented for the meter; on failure nothing is returned and the reason is pushed to
 * `errors`. `type` is the checked type (`dyn` when the checker cannot tell).
 */
function compileExpression(
  env: Environment,
  source: unknown,
  path: string,
  expect: Expect,
  errors: string[],
): { compiled?: CompiledExpression; type?: string } {
  if (typeof source !== 'string' || source.trim() === '') {
    errors.push(`${path}: Required value: an expression is required`);
    return {};
  }
  let program: ParseResult;
  try {
    program = env.parse(source);
  } catch (error) {
    errors.push(`${path}: ${describeCompileError(error, source)}`);
    return {};
  }
  const findings = scan(program.ast);
  if (findings.length > 0) {
    for (const f of findings) errors.push(`${path}: ${f.message} at ${position(source, f.at)}`);
    return {};
  }
  const checked = program.check();
  if (!checked.valid) {
    errors.push(`${path}: ${describeCompileError(checked.error, source)}`);
    return {};
  }
  const type = checked.type ?? 'dyn';
  // As the apiserver: a validation or match condition may be dyn (checked when it runs), a
  // messageExpression must be a string.
  const accepted = type === expect || (expect === 'bool' && type.startsWith('dyn'));
  if (expect !== 'any' && !accepted) {
    errors.push(`${path}: must evaluate to ${expect}, not ${type}`);
    return {};
  }
  // Once per expression: the meter then charges its sized operations whenever it runs.
  instrument(program.ast);
  return { compiled: { source, fieldPath: path, program }, type };
}
