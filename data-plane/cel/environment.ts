// The CEL environment of a policy: the variables Kubernetes' ValidatingAdmissionPolicy
// declares, and the Kubernetes libraries that the CEL library lacks. Built once per process
// (building is the expensive part); each policy clones it to declare its own `variables`.
import { Environment } from '@marcbachmann/cel-js';
import { registerConversions } from './conversions.ts';
import { registerLists } from './lists.ts';
import { registerQuantity } from './quantity.ts';
import { registerRegex } from './regex.ts';
import { registerStrings } from './strings.ts';
import { registerURL } from './url.ts';

/** Variables every expression sees besides `variables`; all dyn (objects have no schema here). */
export const INPUT_VARIABLES = [
  'object',
  'oldObject',
  'request',
  'params',
  'namespaceObject',
] as const;

let base: Environment | undefined;

/** The shared environment without `variables`; frozen once a policy has cloned it. */
export function baseEnvironment(): Environment {
  if (base) return base;
  const env = new Environment({
    enableOptionalTypes: true,
    // Kubernetes' CEL accepts `[1, 'a']` and `{'a': 1, 'b': 'x'}` as list<dyn> / map<string, dyn>.
    homogeneousAggregateLiterals: false,
    limits: { maxAstNodes: 10_000, maxDepth: 100 },
  });
  for (const name of INPUT_VARIABLES) env.registerVariable(name, 'dyn');
  registerQuantity(env);
  registerURL(env);
  registerStrings(env);
  registerLists(env);
  registerRegex(env);
  registerConversions(env);
  base = env;
  return env;
}

/** Types a checked variable may keep as a field type of `variables`; others become dyn. */
const FIELD_TYPE =
  /^(int|uint|double|string|bool|bytes|dyn|Quantity|URL|google\.protobuf\.(Timestamp|Duration)|(list|map)<[A-Za-z0-9_.<>, ]+>)$/;

/** A field type for a variable whose expression checked as `type` (undefined: failed). */
export function fieldType(type: string | undefined): string {
  return type !== undefined && FIELD_TYPE.test(type) && !type.includes('optional') ? type : 'dyn';
}

/**
 * An environment in which `variables` has exactly the given fields (name → CEL type), read
 * from instances of `ctor` (the policy's lazy variable values).
 */
export function policyEnvironment(
  fields: Readonly<Record<string, string>>,
  ctor: new (...args: never[]) => object,
): Environment {
  const env = baseEnvironment().clone();
  try {
    env.registerType('Variables', { ctor, fields: { ...fields } });
  } catch {
    // A type the registry refuses as a field: keep the names, lose the static types.
    return policyEnvironment(
      Object.fromEntries(Object.keys(fields).map((name) => [name, 'dyn'])),
      ctor,
    );
  }
  env.registerVariable('variables', 'Variables');
  return env;
}
