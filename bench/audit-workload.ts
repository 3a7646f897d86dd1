// The audit bench's workload (bench/audit.ts), pure: twenty Policies of common Pod checks, all
// [Audit], and the Pods they judge, each Pod breaking a known set of checks decided by its
// index. `violations(i)` says which, so the bench can check rollcall's counts against what the
// Pods really are; test/unit/bench/audit-workload.test.ts proves it with rollcall's own engine.
import { policyManifest } from '../test/support/manifests.ts';

/** The label the bench's namespaces carry; every Policy's namespaceSelector picks it. */
export const BENCH_NAMESPACE_LABEL = 'bench.rollcall.dev/audit';
/** The label every bench Pod carries (to find and count them). */
export const BENCH_POD_LABEL = 'bench.rollcall.dev/audit-pod';
/** The label the change phase adds and removes; `require-team-label` judges it. */
export const TEAM_LABEL = 'team';
/** The Policy whose result a change flips. */
export const FLIP_POLICY = 'require-team-label';

/** What Pod `i` gets wrong (each a residue of a different modulus: most Pods break nothing). */
export function flaws(i: number) {
  const tagless = i % 97 === 5;
  const foreign = !tagless && i % 40 === 7;
  return {
    noApp: i % 50 === 0,
    noTeam: i % 10 === 3,
    noCostCenter: i % 9 === 2,
    tagless,
    foreign,
    latest: !tagless && !foreign && i % 20 === 1,
    noResources: i % 25 === 2,
    root: i % 15 === 6,
    privileged: i % 200 === 9,
    unhardened: i % 12 === 8,
    keepsCapabilities: i % 18 === 10,
    writableRoot: i % 6 === 1,
    hostNetwork: i % 500 === 11,
    hostPath: i % 300 === 13,
    hostPort: i % 250 === 17,
    noProbe: i % 8 === 5,
    noSeccomp: i % 16 === 14,
  };
}
type Flaws = ReturnType<typeof flaws>;

/** One check: a Policy of one validation, and which flaws break it. */
interface Check {
  name: string;
  expression: string;
  message: string;
  breaks: (f: Flaws) => boolean;
}

const containers = 'object.spec.containers';
const allContainers = (predicate: string) =>
  `${containers}.all(c, ${predicate}) && (!has(object.spec.initContainers) || object.spec.initContainers.all(c, ${predicate}))`;

export const CHECKS: readonly Check[] = [
  {
    name: 'require-app-label',
    expression: "has(object.metadata.labels) && 'app' in object.metadata.labels",
    message: 'pods need an app label',
    breaks: (f) => f.noApp,
  },
  {
    name: FLIP_POLICY,
    expression: `has(object.metadata.labels) && '${TEAM_LABEL}' in object.metadata.labels`,
    message: 'pods need a team label',
    breaks: (f) => f.noTeam,
  },
  {
    name: 'require-cost-center',
    expression: "has(object.metadata.annotations) && 'cost-center' in object.metadata.annotations",
    message: 'pods need a cost-center annotation',
    breaks: (f) => f.noCostCenter,
  },
  {
    name: 'disallow-latest-tag',
    expression: allContainers("!c.image.endsWith(':latest')"),
    message: 'images must not use the :latest tag',
    breaks: (f) => f.latest,
  },
  {
    name: 'require-image-tag',
    expression: allContainers("c.image.contains('@') || c.image.matches(':[^/]+$')"),
    message: 'images need a tag or a digest',
    breaks: (f) => f.tagless,
  },
  {
    name: 'allowed-registries',
    expression: allContainers("c.image.startsWith('registry.example/')"),
    message: 'images must come from registry.example',
    breaks: (f) => f.foreign,
  },
  {
    name: 'require-limits',
    expression: allContainers(
      "has(c.resources) && has(c.resources.limits) && 'cpu' in c.resources.limits && 'memory' in c.resources.limits",
    ),
    message: 'every container needs cpu and memory limits',
    breaks: (f) => f.noResources,
  },
  {
    name: 'require-requests',
    expression: allContainers(
      "has(c.resources) && has(c.resources.requests) && 'cpu' in c.resources.requests && 'memory' in c.resources.requests",
    ),
    message: 'every container needs cpu and memory requests',
    breaks: (f) => f.noResources,
  },
  {
    name: 'run-as-non-root',
    expression:
      'has(object.spec.securityContext) && has(object.spec.securityContext.runAsNonRoot) && object.spec.securityContext.runAsNonRoot == true',
    message: 'pods must run as non-root',
    breaks: (f) => f.root,
  },
  {
    name: 'disallow-privileged',
    expression: allContainers(
      '!has(c.securityContext) || !has(c.securityContext.privileged) || c.securityContext.privileged == false',
    ),
    message: 'privileged containers are not allowed',
    breaks: (f) => f.privileged,
  },
  {
    name: 'disallow-privilege-escalation',
    expression: allContainers(
      'has(c.securityContext) && has(c.securityContext.allowPrivilegeEscalation) && c.securityContext.allowPrivilegeEscalation == false',
    ),
    message: 'containers must set allowPrivilegeEscalation to false',
    // The apiserver refuses a privileged container that sets it false.
    breaks: (f) => f.unhardened || f.privileged,
  },
  {
    name: 'drop-all-capabilities',
    expression: allContainers(
      "has(c.securityContext) && has(c.securityContext.capabilities) && has(c.securityContext.capabilities.drop) && 'ALL' in c.securityContext.capabilities.drop",
    ),
    message: 'containers must drop ALL capabilities',
    breaks: (f) => f.unhardened || f.keepsCapabilities,
  },
  {
    name: 'read-only-root-filesystem',
    expression: allContainers(
      'has(c.securityContext) && has(c.securityContext.readOnlyRootFilesystem) && c.securityContext.readOnlyRootFilesystem == true',
    ),
    message: 'containers must have a read-only root filesystem',
    breaks: (f) => f.unhardened || f.writableRoot,
  },
  {
    name: 'disallow-host-namespaces',
    expression:
      '!(has(object.spec.hostNetwork) && object.spec.hostNetwork) && !(has(object.spec.hostPID) && object.spec.hostPID) && !(has(object.spec.hostIPC) && object.spec.hostIPC)',
    message: 'pods must not share the host network, PID or IPC namespace',
    breaks: (f) => f.hostNetwork,
  },
  {
    name: 'disallow-host-path',
    expression: '!has(object.spec.volumes) || object.spec.volumes.all(v, !has(v.hostPath))',
    message: 'hostPath volumes are not allowed',
    breaks: (f) => f.hostPath,
  },
  {
    name: 'disallow-host-ports',
    expression: allContainers(
      '!has(c.ports) || c.ports.all(p, !has(p.hostPort) || p.hostPort == 0)',
    ),
    message: 'host ports are not allowed',
    breaks: (f) => f.hostPort,
  },
  {
    name: 'require-readiness-probe',
    expression: `${containers}.all(c, has(c.readinessProbe))`,
    message: 'every container needs a readiness probe',
    breaks: (f) => f.noProbe,
  },
  {
    name: 'restrict-seccomp',
    expression:
      "has(object.spec.securityContext) && has(object.spec.securityContext.seccompProfile) && object.spec.securityContext.seccompProfile.type in ['RuntimeDefault', 'Localhost']",
    message: 'pods must use the RuntimeDefault or a Localhost seccomp profile',
    breaks: (f) => f.noSeccomp,
  },
  {
    name: 'max-containers',
    expression: `size(${containers}) <= 4`,
    message: 'at most 4 containers',
    breaks: () => false,
  },
  {
    name: 'pod-name-dns-label',
    expression: "object.metadata.name.matches('^[a-z][a-z0-9-]{0,62}$')",
    message: 'pod names must be lowercase DNS labels',
    breaks: () => false,
  },
];

/** The Policy of `check` on `server`: [Audit], CREATE of Pods in the bench's namespaces. */
export function auditPolicy(check: Check, server: string) {
  return policyManifest(check.name, server, {
    validationActions: ['Audit'],
    validations: [{ expression: check.expression, message: check.message }],
    namespaceSelector: { matchLabels: { [BENCH_NAMESPACE_LABEL]: 'true' } },
    failurePolicy: 'Fail',
    timeoutSeconds: 10,
  });
}

/** The names of the Policies, in CHECKS order. */
export const policyNames = (count = CHECKS.length) => CHECKS.slice(0, count).map((c) => c.name);

/** The checks Pod `i` breaks, by Policy name (of the first `count` Policies). */
export function violations(i: number, count = CHECKS.length): Set<string> {
  const f = flaws(i);
  return new Set(
    CHECKS.slice(0, count)
      .filter((c) => c.breaks(f))
      .map((c) => c.name),
  );
}

export const namespaceName = (n: number) => `audit-${String(n).padStart(3, '0')}`;
export const podName = (i: number) => `pod-${String(i).padStart(5, '0')}`;
/** Pods are dealt round the namespaces, so each holds a mix. */
export const namespaceOf = (i: number, namespaces: number) => namespaceName(i % namespaces);

/**
 * Pod `i` as created: conforming but for its flaws. `nodeName` puts it on kwok's node (kwok
 * makes it Running and Ready); its requests stay small so that 10,000 fit there.
 */
export function benchPod(i: number, nodeName?: string) {
  const f = flaws(i);
  const hardened = !f.unhardened;
  const image = f.tagless
    ? 'registry.example/app'
    : f.foreign
      ? 'docker.io/library/app:1.4'
      : f.latest
        ? 'registry.example/app:latest'
        : `registry.example/app:1.${i % 7}`;
  const labels: Record<string, string> = { [BENCH_POD_LABEL]: 'true' };
  if (!f.noApp) labels.app = `app-${i % 13}`;
  if (!f.noTeam) labels[TEAM_LABEL] = `team-${i % 5}`;
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: podName(i),
      labels,
      ...(!f.noCostCenter && { annotations: { 'cost-center': `cc-${i % 11}` } }),
    },
    spec: {
      ...(nodeName && { nodeName }),
      securityContext: {
        ...(!f.root && { runAsNonRoot: true, runAsUser: 1000 }),
        ...(!f.noSeccomp && { seccompProfile: { type: 'RuntimeDefault' } }),
      },
      ...(f.hostNetwork && { hostNetwork: true }),
      ...(f.hostPath && { volumes: [{ name: 'host', hostPath: { path: '/var/log' } }] }),
      containers: [
        {
          name: 'app',
          image,
          ...(!f.noResources && {
            resources: {
              requests: { cpu: '1m', memory: '4Mi' },
              limits: { cpu: '100m', memory: '64Mi' },
            },
          }),
          ...(f.hostPort && { ports: [{ containerPort: 8080, hostPort: 18080 + (i % 1000) }] }),
          ...(!f.noProbe && { readinessProbe: { httpGet: { path: '/healthz', port: 8080 } } }),
          securityContext: {
            ...(f.privileged && { privileged: true }),
            ...(hardened && !f.privileged && { allowPrivilegeEscalation: false }),
            ...(hardened && !f.keepsCapabilities && { capabilities: { drop: ['ALL'] } }),
            ...(hardened && !f.writableRoot && { readOnlyRootFilesystem: true }),
          },
        },
      ],
    },
  };
}
