/**
 * What a PolicyServer may name. rollcall runs each PolicyServer as a Deployment in its own
 * namespace, next to its controllers and their Secrets, so whoever may write a PolicyServer
 * could otherwise run any image as rollcall-worker (every webhook configuration of the
 * cluster, the namespace's Secrets) or hand it rollcall's webhook CA key. This pure check
 * decides whether a spec may run:
 *
 * - `spec.serviceAccountName`: unset (the namespace's `default` account, to which an install
 *   grants nothing) or one of `serviceAccounts`; never rollcall's controllers' accounts, even
 *   when listed;
 * - every Secret the spec names (`env[].valueFrom.secretKeyRef`, `caSecretRef`): never one of
 *   rollcall's own (named `rollcall-*`: the webhook CA, the UI credentials, Redis'), another
 *   server's serving Secret (`policy-server-<other>-tls`) or one of `protectedSecrets`;
 * - `spec.image`, when `images` lists prefixes: one of them. No spec.image is rollcall's own.
 *
 * The worker refuses a spec that fails (Stalled, reason ForbiddenReference, nothing applied),
 * whether or not the ValidatingAdmissionPolicy of deploy/guard-policyservers.yaml, which
 * refuses the same at apply, is installed. The CRD has no envFrom or volumes, so these are
 * every Secret a spec can reach.
 */
import type { PolicyServer } from '../../api/v1alpha1.ts';
import { policyServerResourceName, servingSecretName } from './policyserver-core.ts';

/** rollcall's controllers: a PolicyServer never runs as one of them. */
export const CONTROLLER_SERVICE_ACCOUNTS: readonly string[] = [
  'rollcall-watcher',
  'rollcall-worker',
];
/** The accounts a PolicyServer may name by default: the policy servers' own. */
export const DEFAULT_POLICY_SERVER_SERVICE_ACCOUNTS: readonly string[] = ['rollcall-policy-server'];
/** The names of rollcall's own Secrets: rollcall-webhook-ca, rollcall-ui(-<hash>), rollcall-redis. */
export const RESERVED_SECRET_PREFIX = 'rollcall-';
/** The condition reason of a refused PolicyServer. */
export const FORBIDDEN_REFERENCE = 'ForbiddenReference';

export interface PolicyServerGuard {
  /**
   * The accounts `spec.serviceAccountName` may name (unset is always allowed). Default
   * DEFAULT_POLICY_SERVER_SERVICE_ACCOUNTS; empty: none. CONTROLLER_SERVICE_ACCOUNTS never count.
   */
  serviceAccounts?: readonly string[];
  /** Prefixes `spec.image` must start with. Absent or empty: any image. */
  images?: readonly string[];
  /**
   * Secrets no PolicyServer may reference besides `rollcall-*` and other servers' serving
   * Secrets: an external Redis URL's, a UI Secret by another name, another server's caSecretRef.
   */
  protectedSecrets?: readonly string[];
}

/** Why a spec may not run: one sentence per forbidden field. */
export interface Refusal {
  reason: typeof FORBIDDEN_REFERENCE;
  problems: string[];
}

/** What may be named, as the messages say it. */
const allowedAccounts = (accounts: readonly string[]) =>
  accounts.length === 0
    ? "none by name: leave it unset (the namespace's default account)"
    : `${accounts.join(', ')}, or leave it unset (the namespace's default account)`;

function serviceAccountProblem(
  name: string | undefined,
  guard: PolicyServerGuard,
): string | undefined {
  if (name === undefined) return undefined;
  const allowed = (guard.serviceAccounts ?? DEFAULT_POLICY_SERVER_SERVICE_ACCOUNTS).filter(
    (a) => !CONTROLLER_SERVICE_ACCOUNTS.includes(a),
  );
  if (CONTROLLER_SERVICE_ACCOUNTS.includes(name))
    return `spec.serviceAccountName ${name} is one of rollcall's controllers' accounts (${CONTROLLER_SERVICE_ACCOUNTS.join(', ')}), never a PolicyServer's; allowed: ${allowedAccounts(allowed)}`;
  if (!allowed.includes(name))
    return `spec.serviceAccountName ${name} is not allowed; allowed: ${allowedAccounts(allowed)} (the worker's --policy-server-service-accounts)`;
  return undefined;
}

/** Why `secret` is not the server's to name, or undefined when it may. */
function secretProblem(
  secret: string,
  server: string,
  guard: PolicyServerGuard,
): string | undefined {
  if (secret.startsWith(RESERVED_SECRET_PREFIX))
    return `rollcall's own (${RESERVED_SECRET_PREFIX}*: the webhook CA, the UI's and Redis' credentials)`;
  const prefix = policyServerResourceName('');
  if (secret.startsWith(prefix) && secret.endsWith('-tls') && secret !== servingSecretName(server))
    return `another policy server's serving Secret (only ${servingSecretName(server)} is this one's)`;
  if (guard.protectedSecrets?.includes(secret))
    return "protected (the worker's --policy-server-protected-secrets)";
  return undefined;
}

/** Every Secret the spec names, with the field that names it. */
function secretReferences(server: PolicyServer): { field: string; secret: string }[] {
  const { env, caSecretRef } = server.spec;
  return [
    ...(env ?? []).flatMap((e) => {
      const ref = e.valueFrom?.secretKeyRef;
      return ref === undefined
        ? []
        : [{ field: `spec.env[${e.name}].valueFrom.secretKeyRef`, secret: ref.name }];
    }),
    ...(caSecretRef === undefined ? [] : [{ field: 'spec.caSecretRef', secret: caSecretRef.name }]),
  ];
}

function imageProblem(image: string | undefined, guard: PolicyServerGuard): string | undefined {
  const prefixes = guard.images ?? [];
  if (image === undefined || prefixes.length === 0) return undefined;
  if (prefixes.some((p) => image.startsWith(p))) return undefined;
  return `spec.image ${image} is not allowed: images must start with ${prefixes.join(', ')} (the worker's --policy-server-images), or leave spec.image unset for rollcall's own`;
}

/** Why the PolicyServer may not run as its spec says, or undefined when it may. */
export function refusePolicyServer(
  server: PolicyServer,
  guard: PolicyServerGuard = {},
): Refusal | undefined {
  const name = server.metadata.name;
  const problems = [
    serviceAccountProblem(server.spec.serviceAccountName, guard),
    ...secretReferences(server).map(({ field, secret }) => {
      const why = secretProblem(secret, name, guard);
      return why === undefined ? undefined : `${field} names Secret ${secret}, ${why}`;
    }),
    imageProblem(server.spec.image, guard),
  ].filter((p): p is string => p !== undefined);
  return problems.length === 0 ? undefined : { reason: FORBIDDEN_REFERENCE, problems };
}

/**
 * The Stalled condition of a refused server. rollcall applies nothing for it: a Deployment it
 * made from an earlier spec keeps running what it last applied (scaling it down would let a
 * bad edit take down every webhook the server answers), and the message says so.
 */
export function refusalCondition(
  server: PolicyServer,
  refusal: Refusal,
  deploymentExists: boolean,
): { reason: string; message: string } {
  const deployment = policyServerResourceName(server.metadata.name);
  const left = deploymentExists
    ? `Its Deployment ${deployment} keeps what rollcall last applied until the spec is fixed (delete the PolicyServer to remove it)`
    : 'No Deployment or Service is created until the spec is fixed';
  return {
    reason: refusal.reason,
    message: `rollcall refuses to run PolicyServer ${server.metadata.name}: ${refusal.problems.join('; ')}. ${left}.`,
  };
}
