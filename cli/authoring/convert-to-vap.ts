/**
 * Policy → ValidatingAdmissionPolicy (see convert.ts): rules become
 * `matchConstraints.resourceRules`; the namespaceSelector also excludes the namespaces every
 * rollcall webhook excludes (so both enforce the same requests); the Policy's validationActions
 * (actionsOf: the deprecated `mode`'s when absent) become the binding's. `settings` are inlined as a first variable
 * holding them as a CEL literal, and `params` in the expressions is rewritten to
 * `variables.params`: VAP's params come from a separate resource, and the only built-in one, a
 * ConfigMap, holds strings, so `params.maxReplicas` would turn from 5 into "5" and
 * `variables.replicas <= params.maxReplicas` would no longer type-check. The VAP records the
 * variable's name in an annotation, so the way back restores `params`.
 */
import type { ASTNode } from '@marcbachmann/cel-js';
import { API_VERSION } from '../../api/constants.ts';
import {
  actionsOf,
  policySpecSchema,
  type PolicySpec,
  type ValidationAction,
} from '../../api/v1alpha1.ts';
import { namespaceSelectorExcluding } from '../../control-plane/functions/webhook-core.ts';
import { zodMessage } from '../../data-plane/lifecycle.ts';
import {
  compileWithinBudget,
  policyExpressions,
  type CompiledPolicy,
  type PolicyCode,
} from '../../data-plane/cel/index.ts';
import {
  CONVERTED_FROM_ANNOTATION,
  isNode,
  paramsToVariable,
  SETTINGS_VARIABLE_ANNOTATION,
  VAP_API_VERSION,
  type Conversion,
  type ConversionNote,
  type ConvertOptions,
} from './convert.ts';
import { isRecord } from './documents.ts';
import { webhookExclusions } from './match.ts';

type Node = ASTNode;

/** A JSON value as a CEL literal: ints as int, fractions as double, mixed aggregates as dyn. */
export function celLiteral(value: unknown): string {
  if (value === null || value === undefined) return 'null';
  if (typeof value === 'boolean') return String(value);
  if (typeof value === 'number') {
    if (Number.isInteger(value) && Number.isSafeInteger(value)) return String(value);
    if (!Number.isFinite(value))
      return value > 0 ? "double('Infinity')" : value < 0 ? "double('-Infinity')" : "double('NaN')";
    const text = String(value);
    return /[.eE]/.test(text) ? text : `${text}.0`;
  }
  if (typeof value === 'string') return JSON.stringify(value);
  const kind = (v: unknown) =>
    v === null
      ? 'null'
      : Array.isArray(v)
        ? 'list'
        : typeof v === 'number'
          ? Number.isInteger(v)
            ? 'int'
            : 'double'
          : typeof v;
  const uniform = (items: unknown[]) => new Set(items.map(kind)).size <= 1;
  const element = (items: unknown[]) => {
    const same = uniform(items);
    return (v: unknown) => (same ? celLiteral(v) : `dyn(${celLiteral(v)})`);
  };
  if (Array.isArray(value)) return `[${value.map(element(value)).join(', ')}]`;
  if (isRecord(value)) {
    const item = element(Object.values(value));
    return `{${Object.entries(value)
      .map(([k, v]) => `${JSON.stringify(k)}: ${item(v)}`)
      .join(', ')}}`;
  }
  return JSON.stringify(String(value));
}

/** What rollcall accepts and the apiserver refuses (docs/cel.md, "Known differences"). */
function apiserverRefuses(policy: CompiledPolicy): ConversionNote[] {
  const notes: ConversionNote[] = [];
  for (const expression of policyExpressions(policy)) {
    const uses = new Set<string>();
    const visit = (item: unknown): void => {
      if (Array.isArray(item)) return item.forEach(visit);
      if (!isNode(item)) return;
      if (item.op === 'rcall') {
        const [method, receiver, args] = item.args as [string, Node, Node[]];
        if (
          method === 'bind' &&
          isNode(receiver) &&
          receiver.op === 'id' &&
          receiver.args === 'cel'
        )
          uses.add('cel.bind');
        else if (method === 'sign' && args.length === 0) uses.add('quantity sign()');
        else if (method === 'reverse' && args.length === 0) uses.add('string reverse()');
      }
      visit(item.args);
    };
    visit(expression.program.ast);
    for (const use of uses)
      notes.push({
        field: expression.fieldPath,
        message: `uses ${use}, which the apiserver's ValidatingAdmissionPolicy environment refuses (docs/cel.md, known differences)`,
        lost: true,
      });
  }
  return notes;
}

const copyRule = (rule: PolicySpec['rules'][number]) => ({
  operations: [...rule.operations],
  apiGroups: [...rule.apiGroups],
  apiVersions: [...rule.apiVersions],
  resources: [...rule.resources],
  scope: rule.scope,
});

/** A Policy (any object) as a ValidatingAdmissionPolicy and its binding. */
export function policyToVap(policy: unknown, options: ConvertOptions = {}): Conversion {
  if (!isRecord(policy) || policy.apiVersion !== API_VERSION || policy.kind !== 'Policy')
    return { ok: false, errors: [`not a ${API_VERSION} Policy`] };
  const metadata = isRecord(policy.metadata) ? policy.metadata : {};
  const name = typeof metadata.name === 'string' ? metadata.name : '';
  if (!name) return { ok: false, errors: ['metadata.name: a Policy needs a name'] };
  const parsed = policySpecSchema.safeParse(policy.spec);
  if (!parsed.success)
    return { ok: false, errors: [`invalid ${zodMessage(parsed.error, 'spec')}`] };
  const spec = parsed.data;
  if (spec.source)
    return {
      ok: false,
      errors: [
        `spec.source: the code is downloaded when a replica loads the policy; a ValidatingAdmissionPolicy needs it inline (download ${spec.source.url}, check its sha256, and put its validations, variables and matchConditions in spec)`,
      ],
    };
  if (!spec.validations)
    return {
      ok: false,
      errors: ['spec.module: a simulator module has no CEL to convert'],
    };
  const code: PolicyCode = {
    validations: spec.validations,
    ...(spec.variables ? { variables: spec.variables } : {}),
    ...(spec.matchConditions ? { matchConditions: spec.matchConditions } : {}),
  };
  const compiled = compileWithinBudget(code, 'spec', spec.settings);
  if (!compiled.ok) return { ok: false, errors: compiled.errors };

  const notes = enforcementNotes(code, compiled.policy);
  const { inlined, settingsVariable, variables, matchConditions, validations } = inlineSettings(
    code,
    spec.settings,
    compiled.policy,
    notes,
  );

  const excluded = webhookExclusions(options);
  notes.push({
    field: 'spec.namespaceSelector',
    message: `also excludes ${excluded.join(', ')}, as every rollcall webhook does`,
    lost: false,
  });
  const actions = actionsOf(spec);
  notes.push(...actionNotes(spec, actions));

  const annotations = {
    [CONVERTED_FROM_ANNOTATION]: `Policy/${name}`,
    ...(inlined ? { [SETTINGS_VARIABLE_ANNOTATION]: settingsVariable } : {}),
  };
  const vap = {
    apiVersion: VAP_API_VERSION,
    kind: 'ValidatingAdmissionPolicy',
    metadata: { name, annotations },
    spec: {
      failurePolicy: spec.failurePolicy,
      matchConstraints: {
        resourceRules: spec.rules.map(copyRule),
        namespaceSelector: namespaceSelectorExcluding(spec.namespaceSelector, excluded),
        objectSelector: spec.objectSelector ?? {},
        matchPolicy: 'Equivalent',
      },
      ...(matchConditions.length ? { matchConditions } : {}),
      ...(variables.length ? { variables } : {}),
      validations,
    },
  };
  const binding = {
    apiVersion: VAP_API_VERSION,
    kind: 'ValidatingAdmissionPolicyBinding',
    metadata: {
      name: `${name}-binding`,
      annotations: { [CONVERTED_FROM_ANNOTATION]: `Policy/${name}` },
    },
    spec: { policyName: name, validationActions: actions },
  };
  return { ok: true, objects: [vap, binding], notes };
}

/**
 * What changes when the apiserver enforces the policy: the fields it has no use for, how its
 * denials read, and what it refuses that rollcall accepts.
 */
function enforcementNotes(code: PolicyCode, policy: CompiledPolicy): ConversionNote[] {
  const notes: ConversionNote[] = [
    {
      field: 'spec.policyServer',
      message: 'dropped: the apiserver evaluates a ValidatingAdmissionPolicy itself',
      lost: false,
    },
    {
      field: 'spec.timeoutSeconds',
      message:
        "dropped: a ValidatingAdmissionPolicy has no timeout (the apiserver's cost budget bounds it)",
      lost: false,
    },
    {
      field: 'spec.validations',
      message:
        "denial messages read \"ValidatingAdmissionPolicy '<policy>' with binding '<binding>' denied request: <message>\" where rollcall answers <message> alone; messageExpression falls back to message the same way",
      lost: false,
    },
    ...apiserverRefuses(policy),
  ];
  code.validations.forEach((v, i) => {
    if (v.reason === 'Unauthorized')
      notes.push({
        field: `spec.validations[${i}].reason`,
        message:
          'Unauthorized: the apiserver refuses this reason in a ValidatingAdmissionPolicy (docs/cel.md, known differences)',
        lost: true,
      });
  });
  return notes;
}

/**
 * The VAP's code: the Policy's, with `settings` inlined as a first variable when an expression
 * reads `params`, and those reads rewritten to it. Notes what became of the settings.
 */
function inlineSettings(
  code: PolicyCode,
  settings: Record<string, unknown>,
  policy: CompiledPolicy,
  notes: ConversionNote[],
) {
  const taken = new Set((code.variables ?? []).map((v) => v.name));
  const settingsVariable =
    ['params', 'settings', 'rollcallParams'].find((n) => !taken.has(n)) ?? 'rollcallSettings';
  const { found: inlined, rewrite } = paramsToVariable(policy, settingsVariable);
  if (inlined)
    notes.push({
      field: 'spec.settings',
      message: `inlined as the first variable, ${settingsVariable}, and params rewritten to variables.${settingsVariable}: a params ConfigMap holds only strings, so typed settings would change type; changing a setting means changing the ValidatingAdmissionPolicy`,
      lost: false,
    });
  else if (Object.keys(settings).length > 0)
    notes.push({
      field: 'spec.settings',
      message: 'dropped: no expression reads params',
      lost: false,
    });

  const variables = [
    ...(inlined ? [{ name: settingsVariable, expression: celLiteral(settings) }] : []),
    ...(code.variables ?? []).map((v, i) => ({
      name: v.name,
      expression: rewrite(`spec.variables[${i}].expression`, v.expression),
    })),
  ];
  const matchConditions = (code.matchConditions ?? []).map((c, i) => ({
    name: c.name,
    expression: rewrite(`spec.matchConditions[${i}].expression`, c.expression),
  }));
  const validations = code.validations.map((v, i) => ({
    expression: rewrite(`spec.validations[${i}].expression`, v.expression),
    ...(v.message !== undefined ? { message: v.message } : {}),
    ...(v.messageExpression !== undefined
      ? {
          messageExpression: rewrite(
            `spec.validations[${i}].messageExpression`,
            v.messageExpression,
          ),
        }
      : {}),
    ...(v.reason !== undefined ? { reason: v.reason } : {}),
  }));
  return { inlined, settingsVariable, variables, matchConditions, validations };
}

/** What reads differently under the VAP's validationActions (nothing is lost). */
function actionNotes(spec: PolicySpec, actions: readonly ValidationAction[]): ConversionNote[] {
  const field = spec.validationActions ? 'spec.validationActions' : 'spec.mode';
  const notes: ConversionNote[] = [];
  if (!spec.validationActions && spec.mode === 'monitor')
    notes.push({ field, message: 'monitor → validationActions [Warn]', lost: false });
  if (actions.includes('Warn'))
    notes.push({
      field,
      message:
        "Warn: the warning reads \"Validation failed for ValidatingAdmissionPolicy '<policy>' with binding '<binding>': <message>\" where rollcall's reads \"<policy> would deny: <message>\"",
      lost: false,
    });
  if (actions.includes('Audit'))
    notes.push({
      field,
      message:
        'Audit: the audit event annotation is validation.policy.admission.k8s.io/validation_failure where rollcall writes <policy>.policies.rollcall.dev/validation_failure',
      lost: false,
    });
  return notes;
}
