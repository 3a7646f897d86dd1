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

const int32 = z.int().min(0).max(2147483647);
const generation = z.int().min(0);

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

export const policySpecSchema = z.object({
  policyServer: z.string().min(1),
  module: z.string().min(1),
  settings: z.record(z.string(), z.unknown()).default({}),
  rules: z.array(ruleSchema).min(1),
  failurePolicy: z.enum(['Fail', 'Ignore']).default('Fail'),
  namespaceSelector: labelSelectorSchema.optional(),
  objectSelector: labelSelectorSchema.optional(),
  timeoutSeconds: z.int().min(1).max(30).default(10),
  mode: z.enum(['protect', 'monitor']).default('protect'),
});
export type PolicySpec = z.output<typeof policySpecSchema>;

export const replicaFailureSchema = z.object({
  pod: z.string(),
  message: z.string().max(1024),
});
export type ReplicaFailure = z.output<typeof replicaFailureSchema>;

/** One word for the STATUS printer column; mirrors the Ready/Reconciling/Stalled conditions. */
export const summarySchema = z.enum(['Ready', 'Reconciling', 'Stalled']);
export type Summary = z.output<typeof summarySchema>;

export const policyStatusSchema = z.object({
  observedGeneration: generation.optional(),
  /** The policy server's desired replicas. */
  replicas: int32.optional(),
  /** Ready, non-terminating, trusted pods that loaded the current generation. */
  readyReplicas: int32.optional(),
  /** Trusted, non-terminating pods whose load of the current generation failed. */
  failedReplicas: int32.optional(),
  /** At most 10 per-replica failures, sorted by pod name. */
  failures: z.array(replicaFailureSchema).max(10).optional(),
  /** The Policy generation whose rules the webhook currently enforces; absent: no webhook. */
  servedGeneration: generation.optional(),
  /** `readyReplicas/replicas`, for the READY printer column. */
  ready: z.string().optional(),
  summary: summarySchema.optional(),
  conditions: z.array(conditionSchema).optional(),
});
export type PolicyStatus = z.output<typeof policyStatusSchema>;

export const policySchema = z.object({
  apiVersion: z.literal('rollcall.dev/v1alpha1'),
  kind: z.literal('Policy'),
  metadata: objectMetaSchema,
  spec: policySpecSchema,
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

export const policyServerSpecSchema = z.object({
  image: z.string().min(1),
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
});
export type PolicyServerSpec = z.output<typeof policyServerSpecSchema>;

export const policyServerStatusSchema = z.object({
  observedGeneration: generation.optional(),
  replicas: int32.optional(),
  readyReplicas: int32.optional(),
  updatedReplicas: int32.optional(),
  availableReplicas: int32.optional(),
  /** `readyReplicas/spec.replicas`, for the READY printer column. */
  ready: z.string().optional(),
  summary: summarySchema.optional(),
  conditions: z.array(conditionSchema).optional(),
});
export type PolicyServerStatus = z.output<typeof policyServerStatusSchema>;

export const policyServerSchema = z.object({
  apiVersion: z.literal('rollcall.dev/v1alpha1'),
  kind: z.literal('PolicyServer'),
  metadata: objectMetaSchema,
  spec: policyServerSpecSchema,
  status: policyServerStatusSchema.optional(),
});
export type PolicyServer = z.output<typeof policyServerSchema>;
