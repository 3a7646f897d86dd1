/**
 * The pure core of the PolicyServer function: from a PolicyServer (and the
 * Deployment rollcall made for it, if any) to the Deployment and Service to
 * server-side apply and the PolicyServer's status.
 *
 * The manifests carry only the fields rollcall owns (server-side apply, field manager
 * `rollcall`): applying them again is a no-op, and fields other managers own (an HPA's
 * replicas excepted — we own replicas) are left alone. Owner references make the
 * Deployment and Service disappear with their PolicyServer.
 *
 * A PolicyServer without `spec.image` runs rollcall's own image as `rollcall policy-server`,
 * with its serving certificate Secret mounted at POLICY_SERVER_TLS_DIR and HTTPS probes, as
 * the image's user on a read-only root with /tmp writable, and default resources; one with an
 * image runs that image's own entrypoint, and rollcall mounts nothing into it. Every pod runs
 * non-root, without capabilities or privilege escalation, and without Service links.
 *
 * Status follows kstatus' Deployment rules: Current → Ready; ProgressDeadlineExceeded
 * → Stalled; anything still converging → Reconciling, with kstatus' reason.
 */
import type {
  V1Container,
  V1Deployment,
  V1EnvVar,
  V1ObjectMeta,
  V1PodSpec,
  V1ResourceRequirements,
  V1Service,
} from '@kubernetes/client-node';
import {
  API_VERSION,
  DEFAULT_POLICY_SERVER_IMAGE,
  MANAGED_BY,
  MANAGED_BY_LABEL,
  POLICY_SERVER_CONTAINER_PORT,
  POLICY_SERVER_ENV,
  POLICY_SERVER_LABEL,
  POLICY_SERVER_LIVENESS_PATH,
  POLICY_SERVER_READINESS_PATH,
  POLICY_SERVER_TLS_DIR,
} from '../../api/constants.ts';
import type { Deployment, OwnerReference } from '../../api/kube.ts';
import type {
  PolicyServer,
  PolicyServerCertificate,
  PolicyServerSources,
  PolicyServerStatus,
  ResourceRequirements,
} from '../../api/v1alpha1.ts';
import { computeStatus } from '../../lib/kstatus/compute.ts';
import { setReadiness, toValidReason, type Readiness } from '../../lib/kstatus/conditions.ts';

export interface PolicyServerOptions {
  /** rollcall's namespace, where every policy server's Deployment and Service live. */
  namespace: string;
  /** The image of PolicyServers without spec.image. Default DEFAULT_POLICY_SERVER_IMAGE. */
  policyServerImage?: string;
}

/** The Service port the webhooks call. */
export const POLICY_SERVER_SERVICE_PORT = 443;
/** The pod volume holding the serving certificate Secret. */
export const POLICY_SERVER_TLS_VOLUME = 'tls';
export const POLICY_SERVER_CONTAINER = 'policy-server';

/** What a PolicyServer's name is prefixed with to name its Deployment and Service. */
export const POLICY_SERVER_RESOURCE_PREFIX = 'policy-server-';

/** Name of both the Deployment and the Service for a PolicyServer. */
export function policyServerResourceName(serverName: string): string {
  return `${POLICY_SERVER_RESOURCE_PREFIX}${serverName}`;
}

/** Labels on the Deployment, Service and pods; the selector uses only POLICY_SERVER_LABEL. */
export function policyServerLabels(serverName: string): Record<string, string> {
  return {
    'app.kubernetes.io/name': 'policy-server',
    'app.kubernetes.io/instance': serverName,
    [MANAGED_BY_LABEL]: MANAGED_BY,
    [POLICY_SERVER_LABEL]: serverName,
  };
}

function ownerReferenceTo(server: PolicyServer): OwnerReference {
  return {
    apiVersion: API_VERSION,
    kind: 'PolicyServer',
    name: server.metadata.name,
    uid: server.metadata.uid ?? '',
    controller: true,
  };
}

/** The metadata of an object a PolicyServer owns: deleting the server deletes it. */
export function ownedMetadata(
  server: PolicyServer,
  name: string,
  namespace: string,
  labels: Record<string, string>,
): V1ObjectMeta {
  return { name, namespace, labels, ownerReferences: [ownerReferenceTo(server)] };
}

/** The image the server's pods run: its own, or rollcall's. */
export function policyServerImage(server: PolicyServer, options: PolicyServerOptions): string {
  return server.spec.image ?? options.policyServerImage ?? DEFAULT_POLICY_SERVER_IMAGE;
}

/**
 * The Secret mounted into pods of rollcall's image: the caSecretRef Secret when one is given
 * (written by someone else, e.g. cert-manager), otherwise `policy-server-<name>-tls`, which
 * rollcall issues when the server brings no CA (and which the operator provides along with
 * spec.caBundle otherwise).
 */
export function tlsSecretNameOf(server: PolicyServer): string {
  return server.spec.caSecretRef?.name ?? servingSecretName(server.metadata.name);
}

/** The serving certificate Secret rollcall issues for a PolicyServer that brings no CA. */
export function servingSecretName(serverName: string): string {
  return `${policyServerResourceName(serverName)}-tls`;
}

/**
 * Arguments of rollcall's image; the node agent of the local cluster appends its own. The
 * spec.sources allowances are flags, present only when granted: without them the server
 * downloads spec.source over HTTPS from public addresses only.
 */
export function policyServerArgs(sources?: PolicyServerSources): string[] {
  return [
    'policy-server',
    `--port=${POLICY_SERVER_CONTAINER_PORT}`,
    `--tls-dir=${POLICY_SERVER_TLS_DIR}`,
    ...(sources?.allowInsecureHTTP ? ['--sources-allow-insecure-http'] : []),
    ...(sources?.allowPrivateDestinations ? ['--sources-allow-private-destinations'] : []),
  ];
}

/** The downward-API environment every replica gets, after the user's own env. */
function downwardEnv(serverName: string): V1EnvVar[] {
  return [
    { name: POLICY_SERVER_ENV.pod, valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
    {
      name: POLICY_SERVER_ENV.namespace,
      valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } },
    },
    { name: POLICY_SERVER_ENV.server, value: serverName },
  ];
}

/** The image's user and group (Dockerfile: `USER 1000:1000`), numeric so the kubelet can verify it. */
export const POLICY_SERVER_UID = 1000;
/** The pod volume at /tmp: the only writable place of rollcall's image (its root is read-only). */
export const POLICY_SERVER_TMP_VOLUME = 'tmp';

/**
 * rollcall's image when spec.resources is absent (spec.resources replaces it whole). The
 * memory limit is the worst case docs/policy-server.md gives for the default 8 evaluation
 * threads, (8 + 1) × 256 MiB, and a margin: it bounds a runaway replica, not a busy one. No
 * CPU limit: throttling would add to every admission's latency.
 */
export const DEFAULT_POLICY_SERVER_RESOURCES = {
  requests: { cpu: '100m', memory: '128Mi' },
  limits: { memory: '2560Mi' },
} as const satisfies V1ResourceRequirements;

/**
 * What rollcall's own image gets besides the container: its user (so the kubelet can check
 * runAsNonRoot and the certificate files' group can be the process's), the certificate
 * Secret readable by that group only, and /tmp. Another image's user and writable paths are
 * its own business: it gets runAsNonRoot and no volume.
 */
function ownImagePod(server: PolicyServer): Pick<V1PodSpec, 'securityContext' | 'volumes'> {
  return {
    securityContext: {
      runAsNonRoot: true,
      runAsUser: POLICY_SERVER_UID,
      runAsGroup: POLICY_SERVER_UID,
      // The kubelet gives the secret volume's files (owned by root) this group: with mode
      // 0440 the process reads them through its group, and no other user may.
      fsGroup: POLICY_SERVER_UID,
      seccompProfile: { type: 'RuntimeDefault' },
    },
    volumes: [
      {
        name: POLICY_SERVER_TLS_VOLUME,
        secret: { secretName: tlsSecretNameOf(server), defaultMode: 0o440 },
      },
      { name: POLICY_SERVER_TMP_VOLUME, emptyDir: { sizeLimit: '16Mi' } },
    ],
  };
}

/** The container of rollcall's own image: its arguments, liveness probe, mounts and read-only root. */
function ownImageContainer(server: PolicyServer): Partial<V1Container> {
  return {
    args: policyServerArgs(server.spec.sources),
    livenessProbe: {
      httpGet: { path: POLICY_SERVER_LIVENESS_PATH, port: 'https', scheme: 'HTTPS' },
      periodSeconds: 10,
      failureThreshold: 3,
    },
    volumeMounts: [
      { name: POLICY_SERVER_TLS_VOLUME, mountPath: POLICY_SERVER_TLS_DIR, readOnly: true },
      { name: POLICY_SERVER_TMP_VOLUME, mountPath: '/tmp' },
    ],
    securityContext: {
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ['ALL'] },
    },
    resources: server.spec.resources
      ? quantitiesAsStrings(server.spec.resources)
      : structuredClone(DEFAULT_POLICY_SERVER_RESOURCES),
  };
}

export function desiredDeployment(
  server: PolicyServer,
  options: PolicyServerOptions,
): V1Deployment {
  const name = server.metadata.name;
  const labels = policyServerLabels(name);
  const { spec } = server;
  // rollcall's own image: its arguments, the certificate volume, both probes and its user.
  const own = spec.image === undefined;
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: ownedMetadata(server, policyServerResourceName(name), options.namespace, labels),
    spec: {
      replicas: spec.replicas,
      progressDeadlineSeconds: spec.progressDeadlineSeconds,
      selector: { matchLabels: { [POLICY_SERVER_LABEL]: name } },
      template: {
        metadata: { labels },
        spec: {
          ...(spec.serviceAccountName === undefined
            ? {}
            : { serviceAccountName: spec.serviceAccountName }),
          // The pod needs no environment variables for the namespace's Services.
          enableServiceLinks: false,
          // Pod Security `restricted`, which rollcall's namespace enforces: the image must
          // run as a non-root user.
          securityContext: { runAsNonRoot: true, seccompProfile: { type: 'RuntimeDefault' } },
          ...(own ? ownImagePod(server) : {}),
          containers: [
            {
              name: POLICY_SERVER_CONTAINER,
              image: policyServerImage(server, options),
              ports: [
                { name: 'https', containerPort: POLICY_SERVER_CONTAINER_PORT, protocol: 'TCP' },
              ],
              env: [...(spec.env ?? []), ...downwardEnv(name)],
              readinessProbe: {
                httpGet: { path: POLICY_SERVER_READINESS_PATH, port: 'https', scheme: 'HTTPS' },
                // rollcall's server is Ready once its policies loaded: say so quickly.
                periodSeconds: own ? 2 : 5,
                failureThreshold: 3,
              },
              securityContext: {
                allowPrivilegeEscalation: false,
                capabilities: { drop: ['ALL'] },
              },
              ...(spec.resources === undefined
                ? {}
                : { resources: quantitiesAsStrings(spec.resources) }),
              ...(own ? ownImageContainer(server) : {}),
            },
          ],
        },
      },
    },
  };
}

/** The CRD accepts `cpu: 1` (int-or-string); the core API wants quantities as strings. */
function quantitiesAsStrings(resources: ResourceRequirements): V1ResourceRequirements {
  const strings = (list: Record<string, number | string> | undefined) =>
    list === undefined
      ? undefined
      : Object.fromEntries(Object.entries(list).map(([k, v]) => [k, String(v)]));
  const limits = strings(resources.limits);
  const requests = strings(resources.requests);
  return {
    ...(limits === undefined ? {} : { limits }),
    ...(requests === undefined ? {} : { requests }),
  };
}

export function desiredService(server: PolicyServer, options: PolicyServerOptions): V1Service {
  const name = server.metadata.name;
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: ownedMetadata(
      server,
      policyServerResourceName(name),
      options.namespace,
      policyServerLabels(name),
    ),
    spec: {
      selector: { [POLICY_SERVER_LABEL]: name },
      ports: [
        { name: 'https', port: POLICY_SERVER_SERVICE_PORT, targetPort: 'https', protocol: 'TCP' },
      ],
    },
  };
}

/** What kstatus says about the Deployment, in the PolicyServer's own words. */
function readinessFrom(
  server: PolicyServer,
  deployment: Deployment | undefined,
  options: PolicyServerOptions,
  now: Date,
): Readiness {
  if (deployment === undefined) {
    return {
      state: 'Reconciling',
      reason: 'DeploymentNotFound',
      message: 'Creating the policy-server Deployment',
    };
  }
  const container = deployment.spec?.template?.spec?.containers?.find(
    (c) => c.name === POLICY_SERVER_CONTAINER,
  );
  if (
    deployment.spec?.replicas !== server.spec.replicas ||
    container?.image !== policyServerImage(server, options)
  ) {
    return {
      state: 'Reconciling',
      reason: 'DeploymentOutOfDate',
      message: 'Applying the policy-server Deployment',
    };
  }
  const result = computeStatus(deployment, { now });
  const abnormal = result.conditions[0];
  switch (result.status) {
    case 'Current':
      return { state: 'Ready', reason: 'Available', message: result.message };
    case 'Failed':
      return {
        state: 'Stalled',
        reason: toValidReason(abnormal?.reason ?? '', 'DeploymentFailed'),
        message: abnormal?.message || result.message,
      };
    case 'InProgress':
      return {
        state: 'Reconciling',
        reason: toValidReason(abnormal?.reason ?? '', 'RollingOut'),
        message: result.message,
      };
    case 'Terminating':
      return {
        state: 'Reconciling',
        reason: 'DeploymentTerminating',
        message: 'The policy-server Deployment is being deleted',
      };
    case 'NotFound':
    case 'Unknown':
      return { state: 'Reconciling', reason: 'DeploymentStatusUnknown', message: result.message };
  }
}

/**
 * What the policyserver function learned about the server's TLS: the serving certificate's
 * facts for the status, or why its webhooks cannot trust it (then the server is Stalled,
 * whatever its Deployment says: the operator must act, and no webhook gets that bundle).
 */
export interface TlsState {
  certificate?: PolicyServerCertificate;
  /** Also why the spec may not run at all (policyserver-guard.ts): Stalled all the same. */
  problem?: { reason: string; message: string };
}

/** The PolicyServer's status, from its Deployment; conditions keep their transition times. */
export function computePolicyServerStatus(
  server: PolicyServer,
  deployment: Deployment | undefined,
  now: Date,
  options: PolicyServerOptions = { namespace: '' },
  tls: TlsState = {},
): PolicyServerStatus {
  const readiness: Readiness =
    tls.problem === undefined
      ? readinessFrom(server, deployment, options, now)
      : {
          state: 'Stalled',
          reason: toValidReason(tls.problem.reason, 'TLSInvalid'),
          message: tls.problem.message,
        };
  const generation = server.metadata.generation;
  const counts = deployment?.status ?? {};
  const readyReplicas = counts.readyReplicas ?? 0;
  return {
    ...(generation === undefined ? {} : { observedGeneration: generation }),
    replicas: counts.replicas ?? 0,
    readyReplicas,
    updatedReplicas: counts.updatedReplicas ?? 0,
    availableReplicas: counts.availableReplicas ?? 0,
    ready: `${readyReplicas}/${server.spec.replicas}`,
    summary: readiness.state,
    conditions: setReadiness(server.status?.conditions, readiness, generation, now),
    ...(tls.certificate === undefined ? {} : { certificate: tls.certificate }),
  };
}

export interface PolicyServerPlan {
  deployment: V1Deployment;
  service: V1Service;
  status: PolicyServerStatus;
}

/** Everything the PolicyServer shell needs for one reconcile. */
export function planPolicyServer(
  server: PolicyServer,
  deployment: Deployment | undefined,
  options: PolicyServerOptions,
  now: Date,
  tls: TlsState = {},
): PolicyServerPlan {
  return {
    deployment: desiredDeployment(server, options),
    service: desiredService(server, options),
    status: computePolicyServerStatus(server, deployment, now, options, tls),
  };
}
