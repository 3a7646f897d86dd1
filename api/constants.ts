/** Names shared by the CRDs, the cores, the watcher and the policy server. */

export const GROUP = 'rollcall.dev';
export const VERSION = 'v1alpha1';
export const API_VERSION = `${GROUP}/${VERSION}`;

/** Field manager for every server-side apply rollcall performs. */
export const FIELD_MANAGER = 'rollcall';

/** Each policy-server pod publishes its replica report in this annotation. */
export const REPORT_ANNOTATION = 'rollcall.dev/policies';
/** Reports larger than this (in UTF-8 bytes) are rejected unread. */
export const REPORT_MAX_BYTES = 64 * 1024;
/** Longest `message` a replica may put in one report entry. */
export const REPORT_MESSAGE_MAX_CHARS = 1024;

/** Label on every policy-server Deployment, Service and pod: its PolicyServer's name. */
export const POLICY_SERVER_LABEL = 'rollcall.dev/policy-server';
/** Label on every webhook configuration: the Policy it enforces. */
export const POLICY_LABEL = 'rollcall.dev/policy';
export const MANAGED_BY_LABEL = 'app.kubernetes.io/managed-by';
export const MANAGED_BY = 'rollcall';

/** Annotation on a webhook configuration: the Policy generation its rules come from. */
export const SERVED_GENERATION_ANNOTATION = 'rollcall.dev/served-generation';

/** At most this many per-replica failures are kept in a Policy's status. */
export const MAX_REPORTED_FAILURES = 10;
