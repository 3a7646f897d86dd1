/**
 * The rollcall.dev/v1alpha1 API: zod schemas are the single source of the TypeScript
 * types (`z.output`), and test/unit/api-crd-drift.test.ts checks them property by
 * property against the CRDs in deploy/crds, so the three cannot drift apart.
 *
 * Objects read from the apiserver have their defaults filled in, so the types are the
 * schemas' *output* (defaulted fields required); parse untrusted objects with the
 * schemas before handing them to a core.
 */
import { z } from 'zod';
import { API_VERSION } from './constants.ts';

const int32 = z.int().min(0).max(2147483647);
const generation = z.int().min(0);
/** A CEL expression, at most as long as ValidatingAdmissionPolicy allows. */
const celExpression = z.string().min(1).max(5120);
/** A name of at most 63 characters, in the form `pattern` gives. */
const shortName = (pattern: RegExp) => z.string().min(1).max(63).regex(pattern);

/** metav1.Condition, as rollcall writes it. */
export const conditionSchema = z.object({
  type: z.string().min(1).max(316),
  status: z.enum(['True', 'False', 'Unknown']),
  reason: z
    .string()
    .min(1)
    .max(1024)
    .regex(/^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$/),
  message: z.string().max(32768),
  lastTransitionTime: z.string(),
  observedGeneration: generation.optional(),
});
export type Condition = z.output<typeof conditionSchema>;

/** Only the metadata the cores read; everything else passes through untouched. */
export const objectMetaSchema = z.looseObject({
  name: z.string().min(1),
  uid: z.string().optional(),
  generation: generation.optional(),
  resourceVersion: z.string().optional(),
  creationTimestamp: z.string().optional(),
  deletionTimestamp: z.string().optional(),
  labels: z.record(z.string(), z.string()).optional(),
  annotations: z.record(z.string(), z.string()).optional(),
});

/** A rollcall.dev/v1alpha1 object of `kind` with `spec`. */
const apiObjectSchema = <Kind extends string, Spec extends z.ZodType>(kind: Kind, spec: Spec) =>
  z.object({
    apiVersion: z.literal(API_VERSION),
    kind: z.literal(kind),
    metadata: objectMetaSchema,
    spec,
  });

export const labelSelectorRequirementSchema = z.object({
  key: z.string().min(1),
  operator: z.enum(['In', 'NotIn', 'Exists', 'DoesNotExist']),
  values: z.array(z.string()).optional(),
});
export const labelSelectorSchema = z.object({
  matchLabels: z.record(z.string(), z.string()).optional(),
  matchExpressions: z.array(labelSelectorRequirementSchema).optional(),
});
export type LabelSelector = z.output<typeof labelSelectorSchema>;

/** admissionregistration.k8s.io/v1 RuleWithOperations. */
export const ruleSchema = z.object({
  operations: z.array(z.enum(['*', 'CREATE', 'UPDATE', 'DELETE', 'CONNECT'])).min(1),
  apiGroups: z.array(z.string()).min(1),
  apiVersions: z.array(z.string().min(1)).min(1),
  resources: z.array(z.string().min(1)).min(1),
  scope: z.enum(['*', 'Cluster', 'Namespaced']).default('*'),
});
export type Rule = z.output<typeof ruleSchema>;

// ---------------------------------------------------------------- Policy

/** What a failed validation does (ValidatingAdmissionPolicyBinding's validationActions). */
export const VALIDATION_ACTIONS = ['Deny', 'Warn', 'Audit'] as const;
export type ValidationAction = (typeof VALIDATION_ACTIONS)[number];
// As the CRD's x-kubernetes-validations say them.
export const VALIDATION_ACTIONS_UNIQUE_MESSAGE = 'validationActions must not repeat an action';
export const VALIDATION_ACTIONS_DENY_WARN_MESSAGE =
  'validationActions may not combine Deny and Warn (Deny already returns the message)';

/** One CEL check, as in ValidatingAdmissionPolicy: the request is denied when it is false. */
export const validationSchema = z.object({
  expression: celExpression,
  message: z.string().max(1024).optional(),
  /** A CEL expression that builds the message; a failure or empty result falls back to `message`. */
  messageExpression: z.string().max(5120).optional(),
  reason: z.enum(['Unauthorized', 'Forbidden', 'Invalid', 'RequestEntityTooLarge']).optional(),
});
export type Validation = z.output<typeof validationSchema>;

/** A named CEL expression, visible to later variables and to validations as `variables.<name>`. */
export const variableSchema = z.object({
  name: shortName(/^[A-Za-z_][A-Za-z0-9_]*$/),
  expression: celExpression,
});
export type Variable = z.output<typeof variableSchema>;

/** A CEL filter: the policy applies only to requests for which every condition is true. */
export const matchConditionSchema = z.object({
  /** A qualified name, as in ValidatingAdmissionPolicy (`not-system`, `exclude.leases`). */
  name: shortName(/^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/),
  expression: celExpression,
});
export type MatchCondition = z.output<typeof matchConditionSchema>;

/** Policy code fetched over HTTP(S): a YAML or JSON `{validations, variables?, matchConditions?}`. */
export const policySourceSchema = z.object({
  url: z
    .string()
    .max(2048)
    .regex(/^https?:\/\/.+/),
  /** Hex SHA-256 of the document's bytes; a download with another digest fails to load. */
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
});
export type PolicySource = z.output<typeof policySourceSchema>;

/** Where a Policy's code comes from; exactly one is set. */
export const POLICY_CODE_FIELDS = ['module', 'validations', 'source'] as const;

/**
 * The Policy spec's fields, without the cross-field rule (zod cannot `.omit` a refined
 * object; the drift test needs to). Parse with `policySpecSchema`.
 */
export const policySpecFieldsSchema = z.object({
  policyServer: z.string().min(1),
  /** Only for the simulator (`sim://...`). */
  module: z.string().min(1).optional(),
  validations: z.array(validationSchema).min(1).max(64).optional(),
  variables: z.array(variableSchema).max(64).optional(),
  matchConditions: z.array(matchConditionSchema).max(64).optional(),
  source: policySourceSchema.optional(),
  /** Free-form; CEL sees it as `params`. */
  settings: z.record(z.string(), z.unknown()).default({}),
  rules: z.array(ruleSchema).min(1),
  failurePolicy: z.enum(['Fail', 'Ignore']).default('Fail'),
  namespaceSelector: labelSelectorSchema.optional(),
  objectSelector: labelSelectorSchema.optional(),
  timeoutSeconds: z.int().min(1).max(30).default(10),
  /** Deprecated: `validationActions` says it (protect is [Deny], monitor is [Warn]). */
  mode: z.enum(['protect', 'monitor']).default('protect'),
  /**
   * What a failed validation does, as in ValidatingAdmissionPolicyBinding: Deny denies, Warn
   * admits with the message as a warning, Audit admits and annotates the audit event. Absent:
   * from `mode` (actionsOf).
   */
  validationActions: z
    .array(z.enum(VALIDATION_ACTIONS))
    .min(1)
    .max(2)
    .refine((a) => new Set(a).size === a.length, { message: VALIDATION_ACTIONS_UNIQUE_MESSAGE })
    .refine((a) => !(a.includes('Deny') && a.includes('Warn')), {
      message: VALIDATION_ACTIONS_DENY_WARN_MESSAGE,
    })
    .optional(),
});

/** The messages match the CRD's x-kubernetes-validations, so both say the same thing. */
export const POLICY_CODE_MESSAGE = 'set exactly one of module, validations or source';
export const POLICY_INLINE_ONLY_MESSAGE =
  'variables and matchConditions go with validations (a source document brings its own)';

export const policySpecSchema = policySpecFieldsSchema.superRefine((spec, ctx) => {
  const set = POLICY_CODE_FIELDS.filter((field) => spec[field] !== undefined);
  if (set.length !== 1) ctx.addIssue({ code: 'custom', message: POLICY_CODE_MESSAGE });
  if (
    spec.validations === undefined &&
    (spec.variables !== undefined || spec.matchConditions !== undefined)
  ) {
    ctx.addIssue({ code: 'custom', message: POLICY_INLINE_ONLY_MESSAGE });
  }
});
export type PolicySpec = z.output<typeof policySpecSchema>;

/** A Policy's validation actions: `validationActions`, else its deprecated `mode`'s. */
export function actionsOf(
  spec: Pick<PolicySpec, 'mode' | 'validationActions'>,
): ValidationAction[] {
  return spec.validationActions ?? (spec.mode === 'monitor' ? ['Warn'] : ['Deny']);
}

export const replicaFailureSchema = z.object({
  pod: z.string(),
  message: z.string().max(1024),
});
export type ReplicaFailure = z.output<typeof replicaFailureSchema>;

/** An existing object the audit found failing, for the status page (`Kind namespace/name`). */
export const auditFailureSchema = z.object({
  object: z.string().max(512),
  message: z.string().max(1024),
});

/**
 * The audit of the objects that exist: how many its rules match (`checked`) and how many of
 * those fail, over the results of `generation`; `completedAt`: when every audited namespace
 * last had results of that generation (absent while the first pass of it runs).
 */
export const policyAuditSchema = z.object({
  generation: generation,
  checked: int32,
  failing: int32,
  errors: int32.optional(),
  completedAt: z.string().optional(),
  /** At most 10 failing objects, sorted. */
  failures: z.array(auditFailureSchema).max(10).optional(),
});
export type PolicyAudit = z.output<typeof policyAuditSchema>;

/** One word for the STATUS printer column; mirrors the Ready/Reconciling/Stalled conditions. */
export const summarySchema = z.enum(['Ready', 'Reconciling', 'Stalled']);
export type Summary = z.output<typeof summarySchema>;

/**
 * The status both kinds publish, aggregated the way a Deployment's is: the generation it
 * describes, `readyReplicas` of `replicas`, the READY and STATUS printer columns and the
 * conditions; `fields` are the kind's own.
 */
function replicaStatusSchema<Fields extends z.ZodRawShape>(fields: Fields) {
  return z.object({
    observedGeneration: generation.optional(),
    replicas: int32.optional(),
    readyReplicas: int32.optional(),
    ready: z.string().optional(),
    summary: summarySchema.optional(),
    conditions: z.array(conditionSchema).optional(),
    ...fields,
  });
}

/**
 * `replicas` is the policy server's desired replicas; `readyReplicas` the Ready,
 * non-terminating, trusted pods that loaded the current generation; READY is
 * `readyReplicas/replicas`.
 */
export const policyStatusSchema = replicaStatusSchema({
  /** Trusted, non-terminating pods whose load of the current generation failed. */
  failedReplicas: int32.optional(),
  /** At most 10 per-replica failures, sorted by pod name. */
  failures: z.array(replicaFailureSchema).max(10).optional(),
  /** The Policy generation whose rules the webhook currently enforces; absent: no webhook. */
  servedGeneration: generation.optional(),
  /** actionsOf(spec) joined by commas (`Deny`, `Warn,Audit`): the MODE printer column. */
  actions: z.string().optional(),
  /** The continuous audit of existing objects (written by the audit-summary function). */
  audit: policyAuditSchema.optional(),
});
export type PolicyStatus = z.output<typeof policyStatusSchema>;

export const policySchema = apiObjectSchema('Policy', policySpecSchema).extend({
  status: policyStatusSchema.optional(),
});
export type Policy = z.output<typeof policySchema>;

// ---------------------------------------------------------------- PolicyServer

const keySelector = z.object({
  name: z.string().min(1),
  key: z.string().min(1),
  optional: z.boolean().optional(),
});
export const envVarSchema = z.object({
  name: z.string().min(1),
  value: z.string().optional(),
  valueFrom: z
    .object({
      secretKeyRef: keySelector.optional(),
      configMapKeyRef: keySelector.optional(),
      fieldRef: z
        .object({ fieldPath: z.string().min(1), apiVersion: z.string().optional() })
        .optional(),
    })
    .optional(),
});
export type EnvVar = z.output<typeof envVarSchema>;

const quantity = z.union([z.int(), z.string()]);
export const resourceRequirementsSchema = z.object({
  limits: z.record(z.string(), quantity).optional(),
  requests: z.record(z.string(), quantity).optional(),
});
export type ResourceRequirements = z.output<typeof resourceRequirementsSchema>;

/**
 * What the `spec.source` downloads of a server's Policies may reach. Absent or false: HTTPS
 * to public addresses only. Every Policy that names the server gets the same allowance.
 */
export const policyServerSourcesSchema = z.object({
  /** Plain `http://` URLs. A redirect from HTTPS to HTTP is never followed. */
  allowInsecureHTTP: z.boolean().default(false),
  /**
   * Loopback and private addresses (127/8, 10/8, 172.16/12, 192.168/16, 100.64/10, ::1,
   * fc00::/7). Link-local addresses (169.254/16, fe80::/10: cloud metadata) stay refused.
   */
  allowPrivateDestinations: z.boolean().default(false),
});
export type PolicyServerSources = z.output<typeof policyServerSourcesSchema>;

export const policyServerSpecSchema = z.object({
  /** Absent: rollcall's own image (DEFAULT_POLICY_SERVER_IMAGE) running `rollcall policy-server`. */
  image: z.string().min(1).optional(),
  replicas: int32.default(1),
  serviceAccountName: z.string().optional(),
  /** Base64 PEM bundle of the CA that signed the policy server's serving certificate. */
  caBundle: z.string().optional(),
  /** Alternative to caBundle: a Secret in rollcall's namespace holding the CA. */
  caSecretRef: z
    .object({ name: z.string().min(1), key: z.string().min(1).default('ca.crt') })
    .optional(),
  progressDeadlineSeconds: z.int().min(1).default(600),
  env: z.array(envVarSchema).optional(),
  resources: resourceRequirementsSchema.optional(),
  sources: policyServerSourcesSchema.optional(),
});
export type PolicyServerSpec = z.output<typeof policyServerSpecSchema>;

/** The serving certificate the webhooks verify, as rollcall last read it. */
export const policyServerCertificateSchema = z.object({
  /** The Secret it is read from (rollcall's serving Secret, or spec.caSecretRef). */
  secret: z.string(),
  issuer: z.string(),
  notBefore: z.string(),
  notAfter: z.string(),
  /** `rollcall` renews it; `external`: whoever writes the caSecretRef Secret must. */
  renewedBy: z.enum(['rollcall', 'external']),
  /** An external certificate in its last 30 days (a Warning Event was recorded). */
  expiresSoon: z.boolean().optional(),
});
export type PolicyServerCertificate = z.output<typeof policyServerCertificateSchema>;

/** The replica counts are its Deployment's; READY is `readyReplicas/spec.replicas`. */
export const policyServerStatusSchema = replicaStatusSchema({
  updatedReplicas: int32.optional(),
  availableReplicas: int32.optional(),
  certificate: policyServerCertificateSchema.optional(),
});
export type PolicyServerStatus = z.output<typeof policyServerStatusSchema>;

export const policyServerSchema = apiObjectSchema('PolicyServer', policyServerSpecSchema).extend({
  status: policyServerStatusSchema.optional(),
});
export type PolicyServer = z.output<typeof policyServerSchema>;

// ---------------------------------------------------------------- PolicyRevision

/**
 * A Policy's spec at one generation, recorded by the webhook function before the webhook
 * serves that generation, so a policy-server replica can load the served generation even
 * while the Policy's current one is broken. Named `<policy>-<generation>` (revisionName).
 */
export const policyRevisionSpecSchema = z.object({
  policy: z.string().min(1),
  /** The Policy's metadata.uid: a revision of a deleted namesake never loads. */
  policyUID: z.string().min(1),
  generation: z.int().min(1),
  /** The Policy's spec at that generation; parse it with policySpecSchema before use. */
  policySpec: z.record(z.string(), z.unknown()),
});
export type PolicyRevisionSpec = z.output<typeof policyRevisionSpecSchema>;

export const policyRevisionSchema = apiObjectSchema('PolicyRevision', policyRevisionSpecSchema);
export type PolicyRevision = z.output<typeof policyRevisionSchema>;
