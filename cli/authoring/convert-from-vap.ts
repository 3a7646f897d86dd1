/**
 * ValidatingAdmissionPolicy → Policy (see convert.ts): one Policy per binding (the VAP's name
 * when it has one binding, else the binding's), with the binding's validationActions as its own
 * and its param resource, when the file holds it, as `settings` (the whole object, so
 * `params.data.x` reads the same). A VAP converted from a Policy gets its `params` back.
 */
import { API_VERSION } from '../../api/constants.ts';
import { policySpecSchema, type LabelSelector } from '../../api/v1alpha1.ts';
import { NAMESPACE_NAME_LABEL } from '../../control-plane/functions/webhook-core.ts';
import { zodMessage } from '../../data-plane/lifecycle.ts';
import { compilePolicy, compileWithinBudget, type PolicyCode } from '../../data-plane/cel/index.ts';
import {
  SETTINGS_VARIABLE_ANNOTATION,
  VAP_API_VERSION,
  variableToParams,
  type Conversion,
  type ConversionNote,
  type ConvertOptions,
} from './convert.ts';
import { isRecord } from './documents.ts';
import { webhookExclusions } from './match.ts';

/** A CEL literal's value as JSON (ints as numbers, maps as objects). */
function literalValue(expression: string): { ok: true; value: unknown } | { ok: false } {
  const compiled = compilePolicy({
    variables: [{ name: 'v', expression }],
    validations: [{ expression: 'true' }],
  });
  const program = compiled.ok ? compiled.policy.variables[0]?.expression.program : undefined;
  if (!program) return { ok: false };
  try {
    const toJson = (v: unknown): unknown =>
      typeof v === 'bigint'
        ? Number(v)
        : Array.isArray(v)
          ? v.map(toJson)
          : v instanceof Map
            ? Object.fromEntries([...v].map(([k, item]) => [String(k), toJson(item)]))
            : isRecord(v)
              ? Object.fromEntries(Object.entries(v).map(([k, item]) => [k, toJson(item)]))
              : v;
    return { ok: true, value: toJson(program({})) };
  } catch {
    return { ok: false };
  }
}

const record = (v: unknown): Record<string, unknown> => (isRecord(v) ? v : {});
const nameOf = (o: Record<string, unknown>) => String(record(o.metadata).name ?? '');
const isVapKind = (o: Record<string, unknown>, kind: string) =>
  o.kind === kind &&
  typeof o.apiVersion === 'string' &&
  o.apiVersion.startsWith('admissionregistration.k8s.io/');

/** The namespaceSelector without the exclusion a converted VAP carries (round trip). */
function withoutExclusion(
  selector: Record<string, unknown>,
  excluded: readonly string[],
): LabelSelector | undefined {
  const expressions = Array.isArray(selector.matchExpressions)
    ? (selector.matchExpressions as Record<string, unknown>[])
    : [];
  const kept = expressions.filter(
    (e) =>
      !(
        e.key === NAMESPACE_NAME_LABEL &&
        e.operator === 'NotIn' &&
        Array.isArray(e.values) &&
        e.values.length === excluded.length &&
        excluded.every((n) => (e.values as unknown[]).includes(n))
      ),
  );
  const matchLabels = isRecord(selector.matchLabels) ? selector.matchLabels : undefined;
  const out: Record<string, unknown> = {
    ...(matchLabels && Object.keys(matchLabels).length ? { matchLabels } : {}),
    ...(kept.length ? { matchExpressions: kept } : {}),
  };
  return Object.keys(out).length ? (out as LabelSelector) : undefined;
}

/** ValidatingAdmissionPolicies (with their bindings and param objects) as rollcall Policies. */
export function vapToPolicies(
  objects: readonly unknown[],
  options: ConvertOptions = {},
): Conversion {
  const all = objects.filter(isRecord);
  const vaps = all.filter((o) => isVapKind(o, 'ValidatingAdmissionPolicy'));
  const bindings = all.filter((o) => isVapKind(o, 'ValidatingAdmissionPolicyBinding'));
  if (vaps.length === 0)
    return { ok: false, errors: ['no ValidatingAdmissionPolicy among the objects'] };
  const excluded = webhookExclusions(options);
  const notes = unboundBindings(bindings, vaps);
  const errors: string[] = [];
  const policies: Record<string, unknown>[] = [];

  for (const vap of vaps) {
    const vapName = nameOf(vap);
    const at = `ValidatingAdmissionPolicy/${vapName}`;
    if (vap.apiVersion !== VAP_API_VERSION)
      notes.push({
        field: at,
        message: `read as ${VAP_API_VERSION} (it is ${String(vap.apiVersion)})`,
        lost: false,
      });
    const spec = record(vap.spec);
    const constraints = record(spec.matchConstraints);
    const rules = resourceRules(constraints, at, notes);
    if (Array.isArray(spec.auditAnnotations) && spec.auditAnnotations.length > 0)
      notes.push({
        field: `${at} spec.auditAnnotations`,
        message:
          'not converted: rollcall has no audit annotation expressions (its Audit action records the failed validation only)',
        lost: true,
      });
    const { settings, restored } = restoreSettings(vap, spec);
    const bound = bindings.filter((b) => record(b.spec).policyName === vapName);
    const paramKind = record(spec.paramKind);

    const variants: { name: string; binding?: Record<string, unknown> }[] =
      bound.length === 0
        ? [{ name: vapName }]
        : bound.map((b) => ({ name: bound.length === 1 ? vapName : nameOf(b), binding: b }));
    if (bound.length === 0)
      notes.push({
        field: at,
        message:
          'no binding among the objects (a VAP without one enforces nothing): converted with validationActions [Deny]',
        lost: false,
      });

    for (const variant of variants) {
      const b = record(variant.binding?.spec);
      const bAt = variant.binding
        ? `ValidatingAdmissionPolicyBinding/${nameOf(variant.binding)}`
        : at;
      const validationActions = bindingActions(b, bAt, notes);
      const found = boundParam(paramKind, variant.binding, at, bAt, all, notes);
      if (!found.ok) {
        errors.push(found.error);
        continue;
      }
      const policySettings = found.param ?? settings;

      const policySpec: Record<string, unknown> = {
        policyServer: options.policyServer ?? 'default',
        validationActions,
        failurePolicy: spec.failurePolicy ?? 'Fail',
        rules,
        ...(withoutExclusion(record(constraints.namespaceSelector), excluded)
          ? { namespaceSelector: withoutExclusion(record(constraints.namespaceSelector), excluded) }
          : {}),
        ...(Object.keys(record(constraints.objectSelector)).length
          ? { objectSelector: constraints.objectSelector }
          : {}),
        ...(policySettings && Object.keys(policySettings).length
          ? { settings: policySettings }
          : {}),
        ...(restored.matchConditions ? { matchConditions: restored.matchConditions } : {}),
        ...(restored.variables ? { variables: restored.variables } : {}),
        validations: restored.validations,
      };
      const checked = policySpecSchema.safeParse(policySpec);
      if (!checked.success) {
        errors.push(`${at}: the Policy would be invalid: ${zodMessage(checked.error, 'spec')}`);
        continue;
      }
      const loads = compileWithinBudget(
        restored as unknown as PolicyCode,
        'spec',
        checked.data.settings,
      );
      if (!loads.ok)
        for (const error of loads.errors)
          notes.push({ field: at, message: `rollcall would not load it: ${error}`, lost: true });
      policies.push({
        apiVersion: API_VERSION,
        kind: 'Policy',
        metadata: { name: variant.name },
        spec: policySpec,
      });
    }
  }
  if (errors.length > 0) return { ok: false, errors };
  return { ok: true, objects: policies, notes };
}

/** The bindings of a policy the objects do not hold: skipped, so they are lost. */
function unboundBindings(
  bindings: readonly Record<string, unknown>[],
  vaps: readonly Record<string, unknown>[],
): ConversionNote[] {
  const notes: ConversionNote[] = [];
  for (const binding of bindings) {
    const target = String(record(binding.spec).policyName ?? '');
    if (!vaps.some((v) => nameOf(v) === target))
      notes.push({
        field: `ValidatingAdmissionPolicyBinding/${nameOf(binding)}`,
        message: `binds ${target || 'no policy'}, which is not among the objects: skipped`,
        lost: true,
      });
  }
  return notes;
}

/** The VAP's resourceRules as rollcall rules, noting what of its matching does not carry over. */
function resourceRules(
  constraints: Record<string, unknown>,
  at: string,
  notes: ConversionNote[],
): Record<string, unknown>[] {
  const lost = (field: string, message: string) =>
    notes.push({ field: `${at} ${field}`, message, lost: true });

  const rules = (Array.isArray(constraints.resourceRules) ? constraints.resourceRules : []).map(
    (raw, i) => {
      const r = record(raw);
      if (Array.isArray(r.resourceNames) && r.resourceNames.length > 0)
        lost(
          `spec.matchConstraints.resourceRules[${i}].resourceNames`,
          'not converted: rollcall rules have no resourceNames (a matchCondition on request.name can say it)',
        );
      return {
        operations: r.operations,
        apiGroups: r.apiGroups,
        apiVersions: r.apiVersions,
        resources: r.resources,
        ...(r.scope !== undefined ? { scope: r.scope } : {}),
      };
    },
  );
  if (
    Array.isArray(constraints.excludeResourceRules) &&
    constraints.excludeResourceRules.length > 0
  )
    lost(
      'spec.matchConstraints.excludeResourceRules',
      'not converted: rollcall rules cannot exclude (a matchCondition on request.resource can say it)',
    );
  if (constraints.matchPolicy === 'Exact')
    lost(
      'spec.matchConstraints.matchPolicy',
      "Exact: rollcall's webhooks match Equivalent requests too",
    );
  return rules;
}

/**
 * The VAP's code, and the settings held in its settings variable when it was converted from a
 * Policy: that variable dropped and its reads turned back into `params`.
 */
function restoreSettings(
  vap: Record<string, unknown>,
  spec: Record<string, unknown>,
): { settings: Record<string, unknown> | undefined; restored: Record<string, unknown> } {
  let settings: Record<string, unknown> | undefined;
  const settingsVariable = record(record(vap.metadata).annotations)[SETTINGS_VARIABLE_ANNOTATION];
  const variables = Array.isArray(spec.variables)
    ? (spec.variables as Record<string, unknown>[])
    : [];
  const code: Record<string, unknown> = {
    validations: spec.validations,
    ...(variables.length ? { variables } : {}),
    ...(Array.isArray(spec.matchConditions) && spec.matchConditions.length
      ? { matchConditions: spec.matchConditions }
      : {}),
  };
  let restored = code;
  if (typeof settingsVariable === 'string') {
    const held = variables.find((v) => v.name === settingsVariable);
    const value =
      typeof held?.expression === 'string' ? literalValue(held.expression) : { ok: false as const };
    if (value.ok && isRecord(value.value)) {
      settings = value.value;
      restored = restoreSettingsReads(code, settingsVariable);
    }
  }
  return { settings, restored };
}

/**
 * The Policy's validationActions: the binding's, as written (the Policy's schema then checks
 * them as the apiserver does; absent: Deny), noting what of the binding is lost.
 */
function bindingActions(b: Record<string, unknown>, bAt: string, notes: ConversionNote[]): unknown {
  const actions = Array.isArray(b.validationActions) ? b.validationActions : ['Deny'];
  if (actions.includes('Warn'))
    notes.push({
      field: `${bAt} spec.validationActions`,
      message: `Warn: rollcall's warning reads "<policy> would deny: <message>"`,
      lost: false,
    });
  if (actions.includes('Audit'))
    notes.push({
      field: `${bAt} spec.validationActions`,
      message:
        'Audit: the audit event annotation is <policy>.policies.rollcall.dev/validation_failure (not validation.policy.admission.k8s.io/validation_failure)',
      lost: false,
    });
  if (isRecord(b.matchResources) && Object.keys(b.matchResources).length > 0)
    notes.push({
      field: `${bAt} spec.matchResources`,
      message: "not converted: rollcall has one set of rules, the VAP's matchConstraints",
      lost: true,
    });
  return actions;
}

/**
 * The param resource a binding names, to become the Policy's settings as a whole; none when the
 * VAP has no paramKind or the binding is missing (then params is {} where the apiserver gives
 * null); an error when the file does not hold it or the binding selects params by label.
 */
function boundParam(
  paramKind: Record<string, unknown>,
  binding: Record<string, unknown> | undefined,
  at: string,
  bAt: string,
  all: readonly Record<string, unknown>[],
  notes: ConversionNote[],
): { ok: true; param?: Record<string, unknown> } | { ok: false; error: string } {
  const paramRef = record(record(binding?.spec).paramRef);
  if (Object.keys(paramKind).length > 0 && binding) {
    if (paramRef.selector !== undefined)
      return {
        ok: false,
        error: `${bAt} spec.paramRef.selector: rollcall has one settings object per Policy; name one param resource`,
      };
    const param = all.find(
      (o) =>
        o.apiVersion === paramKind.apiVersion &&
        o.kind === paramKind.kind &&
        nameOf(o) === paramRef.name &&
        (paramRef.namespace === undefined || record(o.metadata).namespace === paramRef.namespace),
    );
    if (!param)
      return {
        ok: false,
        error: `${bAt} spec.paramRef: ${String(paramKind.kind)} ${paramRef.namespace ? `${String(paramRef.namespace)}/` : ''}${String(paramRef.name)} is not among the objects; add it to the file to turn it into settings`,
      };
    notes.push({
      field: `${bAt} spec.paramRef`,
      message: `${String(paramKind.kind)} ${nameOf(param)} became spec.settings as a whole, so params.data (or params.spec) reads the same`,
      lost: false,
    });
    return { ok: true, param };
  } else if (Object.keys(paramKind).length > 0) {
    notes.push({
      field: `${at} spec.paramKind`,
      message: 'no binding names a param: params is {} in rollcall where the apiserver gives null',
      lost: true,
    });
  }
  return { ok: true };
}

/**
 * The code without the settings variable `name`, every `variables.<name>` read back as
 * `params`. The code is compiled with the variable (as the VAP has it) for the syntax trees.
 */
function restoreSettingsReads(
  code: Record<string, unknown>,
  name: string,
): Record<string, unknown> {
  const compiled = compilePolicy(code as unknown as PolicyCode);
  const toParams = compiled.ok ? variableToParams(compiled.policy, name).rewrite : undefined;
  const rewrite = (source: unknown, fieldPath: string): unknown =>
    typeof source === 'string' && toParams ? toParams(fieldPath, source) : source;
  const list = (v: unknown, field: string) =>
    Array.isArray(v)
      ? v.map((item, i) => {
          const r = record(item);
          return {
            ...r,
            expression: rewrite(r.expression, `spec.${field}[${i}].expression`),
            ...(r.messageExpression !== undefined
              ? {
                  messageExpression: rewrite(
                    r.messageExpression,
                    `spec.${field}[${i}].messageExpression`,
                  ),
                }
              : {}),
          };
        })
      : v;
  const variables = (
    list(code.variables, 'variables') as Record<string, unknown>[] | undefined
  )?.filter((v) => v.name !== name);
  return {
    ...(code.matchConditions
      ? { matchConditions: list(code.matchConditions, 'matchConditions') }
      : {}),
    ...(variables?.length ? { variables } : {}),
    validations: list(code.validations, 'validations'),
  };
}
