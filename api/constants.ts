/** Names shared by the CRDs, the cores, the watcher and the policy server. */

export const GROUP = 'rollcall.dev';
export const VERSION = 'v1alpha1';
export const API_VERSION = `${GROUP}/${VERSION}` as const;

/** Field manager for every server-side apply rollcall performs. */
export const FIELD_MANAGER = 'rollcall';

/** Each policy-server pod publishes its replica report in this annotation. */
export const REPORT_ANNOTATION = 'rollcall.dev/policies';
/**
 * Reports larger than this (in UTF-8 bytes) are rejected unread. Report v2's uid costs ~45
 * bytes an entry, so 64 KiB would cap a server near 600 policies; 192 KiB holds ~1,800 and
 * leaves 64 KiB of the apiserver's 256 KiB for the pod's other annotations.
 */
export const REPORT_MAX_BYTES = 192 * 1024;
/** Longest `message` a replica may put in one report entry. */
export const REPORT_MESSAGE_MAX_CHARS = 1024;

/**
 * Namespaces every webhook rollcall writes excludes besides rollcall's own, unless the worker's
 * `--protected-namespaces` says otherwise: what keeps the control plane (kube-system) and the
 * nodes' heartbeats (kube-node-lease) alive.
 */
export const DEFAULT_PROTECTED_NAMESPACES: readonly string[] = ['kube-system', 'kube-node-lease'];

/** Label on every policy-server Deployment, Service and pod: its PolicyServer's name. */
export const POLICY_SERVER_LABEL = 'rollcall.dev/policy-server';
/** Label on every webhook configuration: the Policy it enforces. */
export const POLICY_LABEL = 'rollcall.dev/policy';
export const MANAGED_BY_LABEL = 'app.kubernetes.io/managed-by';
export const MANAGED_BY = 'rollcall';

/** Annotation on a webhook configuration: the Policy generation its rules come from. */
export const SERVED_GENERATION_ANNOTATION = 'rollcall.dev/served-generation';

/** Annotation on a policy-server Deployment: the hash of the manifest rollcall last applied. */
export const APPLIED_HASH_ANNOTATION = 'rollcall.dev/applied-hash';

/** At most this many per-replica failures are kept in a Policy's status. */
export const MAX_REPORTED_FAILURES = 10;

/** rollcall's own image; a PolicyServer without spec.image runs it as `rollcall policy-server`. */
export const DEFAULT_POLICY_SERVER_IMAGE = 'rollcall:0.1.0';
/** Where a policy-server pod mounts its serving certificate Secret (tls.crt, tls.key, ca.crt). */
export const POLICY_SERVER_TLS_DIR = '/var/run/rollcall/tls';
/** The port a policy-server container serves HTTPS on: admission, probes and metrics. */
export const POLICY_SERVER_CONTAINER_PORT = 8443;
/** A policy server answers 200 here once it can serve admission reviews. */
export const POLICY_SERVER_READINESS_PATH = '/readyz';
/** rollcall's policy server answers 200 here while its process is healthy. */
export const POLICY_SERVER_LIVENESS_PATH = '/healthz';
/**
 * The environment rollcall gives a policy-server pod (its PolicyServer, and its own name and
 * namespace from the downward API), read by `rollcall policy-server` where no flag says.
 */
export const POLICY_SERVER_ENV = {
  server: 'POLICY_SERVER',
  pod: 'POD_NAME',
  namespace: 'POD_NAMESPACE',
} as const;

/** PolicyRevisions carry the Policy's name in this label (and POLICY_SERVER_LABEL). */
export const REVISION_LABEL_POLICY = POLICY_LABEL;
/** How many PolicyRevisions of one Policy are kept, besides the one its webhook serves. */
export const REVISIONS_KEPT = 3;

/** The PolicyRevision recording `policy` at `generation`. */
export function revisionName(policy: string, generation: number): string {
  return `${policy}-${generation}`;
}

/** The ValidatingWebhookConfiguration of a Policy. */
export function webhookConfigurationName(policy: string): string {
  return `rollcall-${policy}`;
}
