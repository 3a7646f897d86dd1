// Shared helpers for the CEL engine's unit tables.
import {
  compilePolicy,
  evaluatePolicy,
  type CompiledPolicy,
  type PolicyCode,
  type Verdict,
} from '../../../../data-plane/cel/index.ts';

/** Compiles or fails the test with the compile errors. */
export function compiled(code: PolicyCode): CompiledPolicy {
  const result = compilePolicy(code);
  if (!result.ok) throw new Error(`does not compile: ${result.errors.join('; ')}`);
  return result.policy;
}

/** A CREATE request for `object`, as the apiserver sends it (parsed JSON). */
export function createRequest(object: unknown): Record<string, unknown> {
  return {
    uid: 'u1',
    kind: { group: '', version: 'v1', kind: 'ConfigMap' },
    resource: { group: '', version: 'v1', resource: 'configmaps' },
    name: 'cm',
    namespace: 'ns',
    operation: 'CREATE',
    userInfo: { username: 'alice', groups: ['dev'] },
    object,
    oldObject: null,
    dryRun: false,
  };
}

/** The verdict of a one-validation policy on `object`. */
export function verdict(code: PolicyCode, object: unknown = {}, params: unknown = null): Verdict {
  return evaluatePolicy(compiled(code), { request: createRequest(object), params });
}

/** Whether a bool expression holds for `object` (through evaluatePolicy). */
export function holds(expression: string, object: unknown = {}): boolean {
  return verdict({ validations: [{ expression }] }, object).allowed;
}

/** The string a string expression gives for `object` (as a messageExpression). */
export function stringOf(expression: string, object: unknown = {}): string | undefined {
  return verdict(
    {
      validations: [{ expression: 'false', message: '<fallback>', messageExpression: expression }],
    },
    object,
  ).message;
}
