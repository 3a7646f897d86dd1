// Differential test of the Pod Security library (policies/pod-security-*.yaml) against the
// apiserver's own PodSecurity admission, the reference implementation of the standard: every pod
// of the corpus is dry-run created (or, for the update cases, dry-run updated) in a namespace
// enforcing `baseline` and one enforcing `restricted` (enforce-version latest), and evaluated
// offline by rollcall's engine (data-plane/cel) with the Baseline policies, and with the
// Baseline and Restricted policies together. The verdicts must agree control by control: the
// set of checks PodSecurity names in its denial is the set of rollcall policies that deny.
//
// A difference is allowed only where the API makes it unavoidable, and each is listed in
// UNOBSERVABLE below with its reason; the test checks that the apiserver does refuse those pods
// as invalid, so PodSecurity never judges them.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { parseAllDocuments } from 'yaml';
import type { V1Container, V1EphemeralContainer, V1Pod, V1PodSpec } from '@kubernetes/client-node';
import { repoRoot } from '../../../tooling/cluster/paths.ts';
import { KubeApiError, kubeConfigTarget, requestJson } from '../../../lib/kube/api.ts';
import {
  compileWithinBudget,
  EvaluationError,
  evaluatePolicy,
  type CompiledPolicy,
} from '../../../data-plane/cel/index.ts';
import { testKubeConfig, uniqueName } from '../../support/kube.ts';
import { mapLimit } from '../../support/map-limit.ts';

// Raw JSON requests, not client-node's models: those drop the fields newer than the client
// (image volumes, probe hosts...), and the point is to send the pods exactly as written.
const api = kubeConfigTarget(testKubeConfig());

const run = uniqueName('pssd').slice(0, 24);
const NS = {
  /** No Pod Security label (privileged): gives each pod as admission sees it, defaulted. */
  mirror: `${run}-mirror`,
  baseline: `${run}-baseline`,
  restricted: `${run}-restricted`,
  /** Labelled only after their pods exist (pods admitted before the level was set). */
  updateBaseline: `${run}-upd-b`,
  updateRestricted: `${run}-upd-r`,
} as const;
const level = (value: 'baseline' | 'restricted') => ({
  'pod-security.kubernetes.io/enforce': value,
  'pod-security.kubernetes.io/enforce-version': 'latest',
});

// ---------------------------------------------------------------- the library

interface LibraryPolicy {
  name: string;
  level: 'baseline' | 'restricted';
  compiled: CompiledPolicy;
  failurePolicy: 'Fail' | 'Ignore';
  rules: { operations: string[]; resources: string[] }[];
}

function loadLibrary(file: string, policyLevel: LibraryPolicy['level']): LibraryPolicy[] {
  const text = readFileSync(join(repoRoot, 'policies', file), 'utf8');
  return parseAllDocuments(text)
    .map((doc) => doc.toJS() as Record<string, unknown> | null)
    .filter((p): p is Record<string, unknown> => p?.kind === 'Policy')
    .map((p) => {
      const name = (p.metadata as { name: string }).name;
      const spec = p.spec as Record<string, unknown> & {
        failurePolicy?: 'Fail' | 'Ignore';
        rules: LibraryPolicy['rules'];
      };
      // What a replica checks when it loads a policy: types, unsupported functions, cost.
      const loaded = compileWithinBudget(
        {
          validations: spec.validations as never,
          variables: spec.variables as never,
          matchConditions: spec.matchConditions as never,
        },
        'spec',
        spec.settings ?? null,
      );
      if (!loaded.ok)
        throw new Error(`${file}: ${name} does not load: ${loaded.errors.join('; ')}`);
      return {
        name,
        level: policyLevel,
        compiled: loaded.policy,
        failurePolicy: spec.failurePolicy ?? 'Fail',
        rules: spec.rules,
      };
    });
}

const BASELINE = loadLibrary('pod-security-baseline.yaml', 'baseline');
const RESTRICTED = loadLibrary('pod-security-restricted.yaml', 'restricted');

/**
 * The check PodSecurity names (its `ForbiddenReason`, k8s.io/pod-security-admission/policy) for
 * each rollcall policy. Two policies share one where Restricted tightens a Baseline check under
 * the same name (seccompProfile, procMount).
 */
const REASON: Record<string, string> = {
  'pss-baseline-host-process': 'hostProcess',
  'pss-baseline-host-namespaces': 'host namespaces',
  'pss-baseline-privileged': 'privileged',
  'pss-baseline-capabilities': 'non-default capabilities',
  'pss-baseline-host-path-volumes': 'hostPath volumes',
  'pss-baseline-host-ports': 'hostPort',
  'pss-baseline-apparmor': 'forbidden AppArmor profile',
  'pss-baseline-selinux': 'seLinuxOptions',
  'pss-baseline-proc-mount': 'procMount',
  'pss-baseline-seccomp': 'seccompProfile',
  'pss-baseline-sysctls': 'forbidden sysctls',
  'pss-baseline-host-probes': 'probe or lifecycle host',
  'pss-restricted-volume-types': 'restricted volume types',
  'pss-restricted-privilege-escalation': 'allowPrivilegeEscalation != false',
  'pss-restricted-run-as-non-root': 'runAsNonRoot != true',
  'pss-restricted-run-as-user': 'runAsUser=0',
  'pss-restricted-seccomp': 'seccompProfile',
  'pss-restricted-capabilities': 'unrestricted capabilities',
  'pss-restricted-proc-mount': 'procMount',
};

/**
 * At `restricted`, PodSecurity does not run these Baseline checks: Restricted's stricter check
 * replaces each (OverrideCheckIDs), and only its name appears. rollcall runs both policies; on
 * any pod the apiserver accepts, the Baseline one denies only when the Restricted one does too
 * (see UNOBSERVABLE for Windows pods), so a denial by the Baseline policy reads as the
 * replacement's name there.
 */
const REPLACED_AT_RESTRICTED: Record<string, string> = {
  'pss-baseline-capabilities': 'unrestricted capabilities',
  'pss-baseline-host-path-volumes': 'restricted volume types',
};

// ---------------------------------------------------------------- the corpus

type Control = keyof typeof REASON;

interface CreateCase {
  name: string;
  pod: V1Pod;
  /** The controls whose fields this pod sets (either way): the coverage check reads it. */
  exercises: Control[];
}

/** An ephemeral container added to a running pod (the pods/ephemeralcontainers subresource). */
interface EphemeralCase {
  name: string;
  ephemeral: V1EphemeralContainer;
  exercises: Control[];
}

const IMAGE = 'registry.k8s.io/pause:3.10';
const container = (name = 'app', extra: Partial<V1Container> = {}): V1Container => ({
  name,
  image: IMAGE,
  ...extra,
});
const pod = (spec: V1PodSpec, annotations?: Record<string, string>): V1Pod => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name: 'x', ...(annotations && { annotations }) },
  spec,
});

/** A container as Restricted wants it. */
const hardened = (name = 'app', extra: Partial<V1Container> = {}): V1Container =>
  container(name, {
    ...extra,
    securityContext: {
      allowPrivilegeEscalation: false,
      capabilities: { drop: ['ALL'] },
      ...extra.securityContext,
    },
  });
/** A pod that complies with Restricted at the pod level; `change` breaks one control. */
const restricted = (change: (spec: V1PodSpec) => void = () => {}): V1Pod => {
  const spec: V1PodSpec = {
    securityContext: { runAsNonRoot: true, seccompProfile: { type: 'RuntimeDefault' } },
    containers: [hardened()],
  };
  change(spec);
  return pod(spec);
};
const first = (spec: V1PodSpec): V1Container => spec.containers[0]!;

const CREATE_CASES: CreateCase[] = [
  // Compliant pods, and the minimal pod Baseline allows and Restricted does not.
  {
    name: 'minimal',
    pod: pod({ containers: [container()] }),
    exercises: [
      'pss-restricted-privilege-escalation',
      'pss-restricted-run-as-non-root',
      'pss-restricted-seccomp',
      'pss-restricted-capabilities',
    ],
  },
  {
    name: 'restricted-pod-level',
    pod: restricted(),
    exercises: [
      'pss-restricted-privilege-escalation',
      'pss-restricted-run-as-non-root',
      'pss-restricted-seccomp',
      'pss-restricted-capabilities',
      'pss-restricted-volume-types',
    ],
  },
  {
    name: 'restricted-per-container',
    pod: pod({
      initContainers: [
        hardened('init', {
          securityContext: {
            runAsNonRoot: true,
            runAsUser: 1000,
            seccompProfile: { type: 'Localhost', localhostProfile: 'profiles/init.json' },
          },
        }),
      ],
      containers: [
        hardened('app', {
          securityContext: {
            runAsNonRoot: true,
            seccompProfile: { type: 'RuntimeDefault' },
            capabilities: { drop: ['ALL'], add: ['NET_BIND_SERVICE'] },
            procMount: 'Default',
          },
        }),
      ],
      volumes: [
        { name: 'config', configMap: { name: 'app-config' } },
        { name: 'secret', secret: { secretName: 'app-secret' } },
        {
          name: 'token',
          projected: { sources: [{ configMap: { name: 'ca' } }] },
        },
        {
          name: 'info',
          downwardAPI: { items: [{ path: 'labels', fieldRef: { fieldPath: 'metadata.labels' } }] },
        },
        { name: 'data', persistentVolumeClaim: { claimName: 'data' } },
        { name: 'driver', csi: { driver: 'inline.storage.example' } },
        {
          name: 'scratch',
          ephemeral: {
            volumeClaimTemplate: {
              spec: { accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '1Gi' } } },
            },
          },
        },
        { name: 'cache', emptyDir: {} },
      ],
    }),
    exercises: [
      'pss-restricted-privilege-escalation',
      'pss-restricted-run-as-non-root',
      'pss-restricted-run-as-user',
      'pss-restricted-seccomp',
      'pss-restricted-capabilities',
      'pss-restricted-volume-types',
      'pss-restricted-proc-mount',
      'pss-baseline-capabilities',
      'pss-baseline-seccomp',
      'pss-baseline-proc-mount',
    ],
  },
  {
    name: 'image-volume',
    pod: restricted((s) => {
      s.volumes = [{ name: 'model', image: { reference: 'registry.example/model:1.0' } } as never];
    }),
    exercises: ['pss-restricted-volume-types'],
  },
  {
    name: 'linux-explicit',
    pod: restricted((s) => (s.os = { name: 'linux' })),
    exercises: ['pss-restricted-privilege-escalation'],
  },
  {
    name: 'baseline-allowed-values',
    pod: pod(
      {
        hostNetwork: false,
        hostPID: false,
        hostIPC: false,
        securityContext: {
          seLinuxOptions: { type: 'container_t', level: 's0:c123,c456' },
          seccompProfile: { type: 'RuntimeDefault' },
          appArmorProfile: { type: 'RuntimeDefault' },
          sysctls: [
            { name: 'net.ipv4.ip_local_port_range', value: '1024 65535' },
            { name: 'kernel.shm_rmid_forced', value: '1' },
            { name: 'net.ipv4.tcp_keepalive_time', value: '600' },
            { name: 'net.ipv4.tcp_rmem', value: '4096 87380 6291456' },
            { name: 'net.ipv4.tcp_notsent_lowat', value: '16384' },
            { name: 'net.ipv4.tcp_slow_start_after_idle', value: '0' },
          ],
        },
        initContainers: [
          container('init', {
            securityContext: {
              privileged: false,
              capabilities: { add: ['CHOWN', 'SETUID', 'SETGID'] },
              seLinuxOptions: { type: 'container_init_t' },
            },
          }),
        ],
        containers: [
          container('app', {
            ports: [{ containerPort: 8080 }],
            livenessProbe: { httpGet: { path: '/healthz', port: 8080 } },
            readinessProbe: { tcpSocket: { port: 8080 } },
            lifecycle: { preStop: { httpGet: { path: '/stop', port: 8080 } } },
            securityContext: {
              privileged: false,
              capabilities: { add: ['NET_BIND_SERVICE', 'KILL', 'AUDIT_WRITE'], drop: ['NET_RAW'] },
              procMount: 'Default',
              seccompProfile: { type: 'Localhost', localhostProfile: 'profiles/app.json' },
              appArmorProfile: { type: 'Localhost', localhostProfile: 'app' },
              seLinuxOptions: { type: 'container_engine_t' },
            },
          }),
          container('sidecar', { securityContext: { windowsOptions: { hostProcess: false } } }),
        ],
        volumes: [{ name: 'cache', emptyDir: {} }],
      },
      { 'container.apparmor.security.beta.kubernetes.io/sidecar': 'localhost/custom' },
    ),
    exercises: [
      'pss-baseline-host-process',
      'pss-baseline-host-namespaces',
      'pss-baseline-privileged',
      'pss-baseline-capabilities',
      'pss-baseline-host-path-volumes',
      'pss-baseline-host-ports',
      'pss-baseline-apparmor',
      'pss-baseline-selinux',
      'pss-baseline-proc-mount',
      'pss-baseline-seccomp',
      'pss-baseline-sysctls',
      'pss-baseline-host-probes',
    ],
  },

  // HostProcess (the apiserver requires hostNetwork of a HostProcess pod).
  {
    name: 'host-process-pod',
    pod: pod({
      os: { name: 'windows' },
      hostNetwork: true,
      securityContext: { windowsOptions: { hostProcess: true } },
      containers: [container()],
    }),
    exercises: ['pss-baseline-host-process', 'pss-baseline-host-namespaces'],
  },
  {
    name: 'host-process-container',
    pod: pod({
      hostNetwork: true,
      containers: [
        container('app', { securityContext: { windowsOptions: { hostProcess: true } } }),
      ],
    }),
    exercises: ['pss-baseline-host-process', 'pss-baseline-host-namespaces'],
  },

  // Host namespaces
  ...(['hostNetwork', 'hostPID', 'hostIPC'] as const).map((field): CreateCase => ({
    name: `host-namespace-${field.toLowerCase()}`,
    pod: restricted((s) => (s[field] = true)),
    exercises: ['pss-baseline-host-namespaces'],
  })),

  // Privileged
  {
    name: 'privileged-container',
    pod: pod({
      containers: [container('app'), container('debug', { securityContext: { privileged: true } })],
    }),
    exercises: ['pss-baseline-privileged'],
  },
  {
    name: 'privileged-init',
    pod: restricted((s) => {
      s.initContainers = [container('setup', { securityContext: { privileged: true } })];
    }),
    exercises: ['pss-baseline-privileged', 'pss-restricted-privilege-escalation'],
  },

  // Capabilities
  {
    name: 'capabilities-sys-admin',
    pod: restricted((s) => {
      first(s).securityContext!.capabilities = { drop: ['ALL'], add: ['SYS_ADMIN'] };
    }),
    exercises: ['pss-baseline-capabilities', 'pss-restricted-capabilities'],
  },
  {
    name: 'capabilities-init-net-raw',
    pod: restricted((s) => {
      s.initContainers = [
        hardened('setup', {
          securityContext: { capabilities: { drop: ['ALL'], add: ['NET_RAW'] } },
        }),
      ];
    }),
    exercises: ['pss-baseline-capabilities', 'pss-restricted-capabilities'],
  },
  {
    name: 'capabilities-add-chown',
    pod: restricted((s) => {
      first(s).securityContext!.capabilities = { drop: ['ALL'], add: ['CHOWN'] };
    }),
    exercises: ['pss-baseline-capabilities', 'pss-restricted-capabilities'],
  },
  {
    name: 'capabilities-not-dropped',
    pod: restricted((s) => {
      first(s).securityContext!.capabilities = { drop: ['NET_RAW'] };
    }),
    exercises: ['pss-restricted-capabilities'],
  },
  {
    name: 'capabilities-second-container-unset',
    pod: restricted((s) => {
      s.containers.push(
        container('sidecar', { securityContext: { allowPrivilegeEscalation: false } }),
      );
    }),
    exercises: ['pss-restricted-capabilities'],
  },

  // Volumes
  {
    name: 'volume-host-path',
    pod: restricted((s) => {
      s.volumes = [
        { name: 'cache', emptyDir: {} },
        { name: 'logs', hostPath: { path: '/var/log' } },
      ];
    }),
    exercises: ['pss-baseline-host-path-volumes', 'pss-restricted-volume-types'],
  },
  {
    name: 'volume-nfs',
    pod: restricted((s) => {
      s.volumes = [{ name: 'shared', nfs: { server: 'nfs.example', path: '/exports' } }];
    }),
    exercises: ['pss-baseline-host-path-volumes', 'pss-restricted-volume-types'],
  },
  {
    name: 'volume-iscsi',
    pod: restricted((s) => {
      s.volumes = [
        {
          name: 'lun',
          iscsi: { targetPortal: '10.0.0.2:3260', iqn: 'iqn.2001-04.example:disk', lun: 0 },
        },
      ];
    }),
    exercises: ['pss-restricted-volume-types'],
  },

  // Host ports
  {
    name: 'host-port',
    pod: restricted((s) => {
      first(s).ports = [{ containerPort: 8080 }, { containerPort: 9090, hostPort: 9090 }];
    }),
    exercises: ['pss-baseline-host-ports'],
  },
  {
    name: 'host-port-sidecar',
    pod: restricted((s) => {
      s.initContainers = [
        hardened('dns', {
          restartPolicy: 'Always',
          ports: [{ containerPort: 53, hostPort: 53, protocol: 'UDP' }],
        }),
      ];
    }),
    exercises: ['pss-baseline-host-ports'],
  },

  // AppArmor
  {
    name: 'apparmor-pod-unconfined',
    pod: restricted((s) => (s.securityContext!.appArmorProfile = { type: 'Unconfined' })),
    exercises: ['pss-baseline-apparmor'],
  },
  {
    name: 'apparmor-container-unconfined',
    pod: restricted((s) => (first(s).securityContext!.appArmorProfile = { type: 'Unconfined' })),
    exercises: ['pss-baseline-apparmor'],
  },
  {
    name: 'apparmor-annotation-unconfined',
    pod: {
      ...restricted(),
      metadata: {
        name: 'x',
        annotations: { 'container.apparmor.security.beta.kubernetes.io/app': 'unconfined' },
      },
    },
    exercises: ['pss-baseline-apparmor'],
  },
  {
    name: 'apparmor-localhost',
    pod: restricted((s) => {
      s.securityContext!.appArmorProfile = { type: 'Localhost', localhostProfile: 'k8s-apparmor' };
    }),
    exercises: ['pss-baseline-apparmor'],
  },

  // SELinux
  {
    name: 'selinux-pod-type',
    pod: restricted((s) => (s.securityContext!.seLinuxOptions = { type: 'spc_t' })),
    exercises: ['pss-baseline-selinux'],
  },
  {
    name: 'selinux-container-user',
    pod: restricted((s) => (first(s).securityContext!.seLinuxOptions = { user: 'system_u' })),
    exercises: ['pss-baseline-selinux'],
  },
  {
    name: 'selinux-init-role',
    pod: restricted((s) => {
      s.initContainers = [
        hardened('setup', { securityContext: { seLinuxOptions: { role: 'system_r' } } }),
      ];
    }),
    exercises: ['pss-baseline-selinux'],
  },
  {
    name: 'selinux-level-only',
    pod: restricted((s) => (s.securityContext!.seLinuxOptions = { level: 's0:c1,c2' })),
    exercises: ['pss-baseline-selinux'],
  },

  // /proc mount type (Unmasked needs hostUsers: false, which Baseline exempts)
  {
    name: 'proc-mount-unmasked-user-namespace',
    pod: restricted((s) => {
      s.hostUsers = false;
      first(s).securityContext!.procMount = 'Unmasked';
    }),
    exercises: ['pss-baseline-proc-mount', 'pss-restricted-proc-mount'],
  },

  // Seccomp
  {
    name: 'seccomp-pod-unconfined',
    pod: restricted((s) => (s.securityContext!.seccompProfile = { type: 'Unconfined' })),
    exercises: ['pss-baseline-seccomp', 'pss-restricted-seccomp'],
  },
  {
    name: 'seccomp-container-unconfined',
    pod: restricted((s) => (first(s).securityContext!.seccompProfile = { type: 'Unconfined' })),
    exercises: ['pss-baseline-seccomp', 'pss-restricted-seccomp'],
  },
  {
    name: 'seccomp-unset',
    pod: restricted((s) => delete s.securityContext!.seccompProfile),
    exercises: ['pss-restricted-seccomp'],
  },
  {
    name: 'seccomp-one-container-only',
    pod: restricted((s) => {
      delete s.securityContext!.seccompProfile;
      first(s).securityContext!.seccompProfile = { type: 'RuntimeDefault' };
      s.containers.push(hardened('sidecar'));
    }),
    exercises: ['pss-restricted-seccomp'],
  },
  {
    name: 'seccomp-every-container-localhost',
    pod: restricted((s) => {
      delete s.securityContext!.seccompProfile;
      first(s).securityContext!.seccompProfile = { type: 'Localhost', localhostProfile: 'a.json' };
    }),
    exercises: ['pss-baseline-seccomp', 'pss-restricted-seccomp'],
  },

  // Sysctls
  {
    name: 'sysctl-unsafe',
    pod: restricted((s) => {
      s.securityContext!.sysctls = [
        { name: 'net.ipv4.tcp_syncookies', value: '1' },
        { name: 'kernel.msgmax', value: '65536' },
      ];
    }),
    exercises: ['pss-baseline-sysctls'],
  },
  {
    name: 'sysctl-unsafe-net',
    pod: restricted((s) => {
      s.securityContext!.sysctls = [{ name: 'net.core.somaxconn', value: '1024' }];
    }),
    exercises: ['pss-baseline-sysctls'],
  },

  // Host probes and lifecycle hooks
  {
    name: 'probe-http-host',
    pod: restricted((s) => {
      first(s).livenessProbe = { httpGet: { host: '169.254.169.254', path: '/', port: 80 } };
    }),
    exercises: ['pss-baseline-host-probes'],
  },
  {
    name: 'probe-tcp-host-sidecar',
    pod: restricted((s) => {
      s.initContainers = [
        hardened('proxy', {
          restartPolicy: 'Always',
          readinessProbe: { tcpSocket: { host: '10.0.0.1', port: 22 } },
        }),
      ];
    }),
    exercises: ['pss-baseline-host-probes'],
  },
  {
    name: 'lifecycle-host',
    pod: restricted((s) => {
      first(s).lifecycle = { preStop: { httpGet: { host: 'example.com', path: '/', port: 80 } } };
    }),
    exercises: ['pss-baseline-host-probes'],
  },
  {
    name: 'startup-probe-without-host',
    pod: restricted((s) => {
      first(s).startupProbe = { httpGet: { path: '/ready', port: 8080 } };
      first(s).lifecycle = { postStart: { httpGet: { path: '/started', port: 8080 } } };
    }),
    exercises: ['pss-baseline-host-probes'],
  },

  // Privilege escalation
  {
    name: 'escalation-unset',
    pod: restricted((s) => delete first(s).securityContext!.allowPrivilegeEscalation),
    exercises: ['pss-restricted-privilege-escalation'],
  },
  {
    name: 'escalation-init-true',
    pod: restricted((s) => {
      s.initContainers = [
        hardened('setup', { securityContext: { allowPrivilegeEscalation: true } }),
      ];
    }),
    exercises: ['pss-restricted-privilege-escalation'],
  },

  // Running as non-root
  {
    name: 'non-root-unset',
    pod: restricted((s) => delete s.securityContext!.runAsNonRoot),
    exercises: ['pss-restricted-run-as-non-root'],
  },
  {
    name: 'non-root-pod-false',
    pod: restricted((s) => {
      s.securityContext!.runAsNonRoot = false;
      first(s).securityContext!.runAsNonRoot = true;
    }),
    exercises: ['pss-restricted-run-as-non-root'],
  },
  {
    name: 'non-root-container-false',
    pod: restricted((s) => (first(s).securityContext!.runAsNonRoot = false)),
    exercises: ['pss-restricted-run-as-non-root'],
  },
  {
    name: 'non-root-per-container-one-missing',
    pod: restricted((s) => {
      delete s.securityContext!.runAsNonRoot;
      first(s).securityContext!.runAsNonRoot = true;
      s.initContainers = [hardened('setup')];
    }),
    exercises: ['pss-restricted-run-as-non-root'],
  },

  // Running as a non-root user
  {
    name: 'run-as-root-pod',
    pod: restricted((s) => (s.securityContext!.runAsUser = 0)),
    exercises: ['pss-restricted-run-as-user'],
  },
  {
    name: 'run-as-root-init',
    pod: restricted((s) => {
      s.initContainers = [hardened('setup', { securityContext: { runAsUser: 0 } })];
    }),
    exercises: ['pss-restricted-run-as-user'],
  },
  {
    name: 'run-as-user-1000',
    pod: restricted((s) => (s.securityContext!.runAsUser = 1000)),
    exercises: ['pss-restricted-run-as-user'],
  },
  {
    name: 'user-namespace-root',
    pod: restricted((s) => {
      s.hostUsers = false;
      s.securityContext = { runAsUser: 0, seccompProfile: { type: 'RuntimeDefault' } };
    }),
    exercises: ['pss-restricted-run-as-user', 'pss-restricted-run-as-non-root'],
  },

  // Windows pods: exempt from privilege escalation, seccomp and capabilities, not from the rest.
  {
    name: 'windows-restricted',
    pod: pod({
      os: { name: 'windows' },
      securityContext: { runAsNonRoot: true },
      containers: [container()],
    }),
    exercises: [
      'pss-restricted-privilege-escalation',
      'pss-restricted-seccomp',
      'pss-restricted-capabilities',
      'pss-restricted-run-as-non-root',
    ],
  },
  {
    name: 'windows-minimal',
    pod: pod({ os: { name: 'windows' }, containers: [container()] }),
    exercises: ['pss-restricted-run-as-non-root'],
  },
  {
    name: 'windows-host-path',
    pod: pod({
      os: { name: 'windows' },
      securityContext: { runAsNonRoot: true },
      containers: [container()],
      volumes: [{ name: 'c', hostPath: { path: 'C:\\data' } }],
    }),
    exercises: ['pss-baseline-host-path-volumes', 'pss-restricted-volume-types'],
  },

  // Many controls at once.
  {
    name: 'everything-wrong',
    pod: pod(
      {
        hostPID: true,
        securityContext: {
          sysctls: [{ name: 'kernel.sem', value: '250 32000 100 128' }],
          seccompProfile: { type: 'Unconfined' },
        },
        initContainers: [
          container('init', {
            securityContext: { runAsUser: 0, capabilities: { add: ['SYS_ADMIN'] } },
          }),
        ],
        containers: [
          container('app', {
            ports: [{ containerPort: 80, hostPort: 80 }],
            securityContext: { privileged: true, seLinuxOptions: { type: 'spc_t' } },
          }),
        ],
        volumes: [{ name: 'root', hostPath: { path: '/' } }],
      },
      { 'container.apparmor.security.beta.kubernetes.io/app': 'unconfined' },
    ),
    exercises: [
      'pss-baseline-host-namespaces',
      'pss-baseline-sysctls',
      'pss-baseline-seccomp',
      'pss-baseline-capabilities',
      'pss-baseline-host-ports',
      'pss-baseline-privileged',
      'pss-baseline-selinux',
      'pss-baseline-host-path-volumes',
      'pss-baseline-apparmor',
      'pss-restricted-run-as-user',
    ],
  },
];

/** Added to a running pod that complies with Restricted (EPHEMERAL_BASE). */
const EPHEMERAL_CASES: EphemeralCase[] = [
  {
    name: 'ephemeral-hardened',
    ephemeral: {
      name: 'debugger',
      image: IMAGE,
      securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'] } },
    },
    exercises: ['pss-restricted-privilege-escalation', 'pss-restricted-capabilities'],
  },
  {
    name: 'ephemeral-privileged',
    ephemeral: { name: 'debugger', image: IMAGE, securityContext: { privileged: true } },
    exercises: ['pss-baseline-privileged', 'pss-restricted-privilege-escalation'],
  },
  {
    name: 'ephemeral-sys-ptrace',
    ephemeral: {
      name: 'debugger',
      image: IMAGE,
      securityContext: {
        allowPrivilegeEscalation: false,
        capabilities: { drop: ['ALL'], add: ['SYS_PTRACE'] },
      },
    },
    exercises: ['pss-baseline-capabilities', 'pss-restricted-capabilities'],
  },
  {
    name: 'ephemeral-plain',
    ephemeral: { name: 'debugger', image: IMAGE },
    exercises: ['pss-restricted-privilege-escalation', 'pss-restricted-capabilities'],
  },
  {
    name: 'ephemeral-root',
    ephemeral: {
      name: 'debugger',
      image: IMAGE,
      securityContext: {
        runAsUser: 0,
        allowPrivilegeEscalation: false,
        capabilities: { drop: ['ALL'] },
      },
    },
    exercises: ['pss-restricted-run-as-user'],
  },
];
const EPHEMERAL_BASE = restricted();

/**
 * Updates of a pod admitted before its namespace got a level: it breaks Baseline (privileged)
 * and Restricted. PodSecurity checks an update only when it changes an image or adds a
 * container; the policies' `pod-spec-change` match condition does the same.
 */
const LEGACY_POD = pod({
  containers: [container('app', { securityContext: { privileged: true } })],
});
const UPDATE_CASES: { name: string; change: (pod: V1Pod) => void }[] = [
  {
    name: 'update-labels-only',
    change: (p) => (p.metadata!.labels = { ...p.metadata!.labels, tier: 'backend' }),
  },
  {
    name: 'update-image',
    change: (p) => (p.spec!.containers[0]!.image = 'registry.k8s.io/pause:3.9'),
  },
];

/**
 * Where rollcall and PodSecurity would disagree, but the apiserver refuses the pod before
 * PodSecurity runs (422 Invalid), so no admission ever sees the difference. Each is asserted.
 */
const UNOBSERVABLE: { name: string; pod: V1Pod; reason: string }[] = [
  {
    name: 'baseline-proc-mount-unmasked',
    pod: restricted((s) => (first(s).securityContext!.procMount = 'Unmasked')),
    reason:
      'pss-baseline-proc-mount denies Unmasked /proc on a pod without hostUsers: false, as ' +
      'PodSecurity would; the apiserver accepts Unmasked only with hostUsers: false, which the ' +
      'Baseline check exempts, so the control never fails on a valid pod',
  },
  {
    name: 'windows-capabilities',
    pod: pod({
      os: { name: 'windows' },
      containers: [container('app', { securityContext: { capabilities: { add: ['SYS_ADMIN'] } } })],
    }),
    reason:
      'at restricted, PodSecurity replaces the Baseline capabilities check with Restricted’s, ' +
      'which exempts Windows pods; rollcall runs both, so pss-baseline-capabilities would deny a ' +
      'Windows pod adding capabilities that PodSecurity admits. Windows pods cannot set ' +
      'capabilities at all',
  },
  {
    name: 'windows-seccomp',
    pod: pod({
      os: { name: 'windows' },
      securityContext: { seccompProfile: { type: 'Unconfined' } },
      containers: [container()],
    }),
    reason:
      'the same for seccomp: PodSecurity at restricted skips Windows pods entirely, rollcall’s ' +
      'pss-baseline-seccomp would still deny Unconfined; Windows pods cannot set a seccomp profile',
  },
  {
    name: 'host-process-without-host-network',
    pod: pod({
      os: { name: 'windows' },
      securityContext: { windowsOptions: { hostProcess: true } },
      containers: [container()],
    }),
    reason:
      'not a difference, a limit of the corpus: a HostProcess pod must set hostNetwork, so ' +
      'hostProcess is only ever seen denied together with host namespaces',
  },
];

// ---------------------------------------------------------------- the two sides

interface Verdict {
  /** The checks that deny, by PodSecurity's names (empty: allowed). */
  reasons: string[];
}

/** PodSecurity's names out of its denial: `violates PodSecurity "baseline:latest": a (…), b (…)`. */
function podSecurityReasons(message: string): string[] {
  const marker = message.match(/violates PodSecurity "[^"]+": /);
  if (!marker) throw new Error(`not a PodSecurity denial: ${message}`);
  const list = message.slice(marker.index! + marker[0].length);
  const reasons: string[] = [];
  let depth = 0;
  let current = '';
  for (const ch of list) {
    if (ch === '(') depth++;
    if (ch === ')') depth--;
    if (depth === 0 && ch === ',') {
      reasons.push(current);
      current = '';
    } else current += ch;
  }
  reasons.push(current);
  return reasons
    .map((r) => r.replace(/\(.*\)/s, '').trim())
    .map((r) => (r === 'forbidden AppArmor profiles' ? 'forbidden AppArmor profile' : r))
    .sort();
}

const ns = (namespace: string) => `/api/v1/namespaces/${namespace}`;

async function dryRun(
  method: 'POST' | 'PUT',
  path: string,
  body: V1Pod,
): Promise<{ ok: true; object: V1Pod } | { ok: false; code: number; message: string }> {
  try {
    const object = (await requestJson(api, method, path, {
      query: { dryRun: 'All' },
      body,
    })) as V1Pod;
    return { ok: true, object };
  } catch (err) {
    if (!(err instanceof KubeApiError)) throw err;
    return { ok: false, code: err.statusCode, message: err.status?.message ?? '' };
  }
}

/** The apiserver's verdict on a dry run in a namespace with a Pod Security level. */
async function podSecurity(method: 'POST' | 'PUT', path: string, body: V1Pod): Promise<Verdict> {
  const answer = await dryRun(method, path, body);
  if (answer.ok) return { reasons: [] };
  if (answer.code !== 403) throw new Error(`${method} ${path}: ${answer.code} ${answer.message}`);
  return { reasons: podSecurityReasons(answer.message) };
}

/** The request rollcall judges: what the apiserver admitted, in the namespace of a level. */
interface PodRequest {
  operation: 'CREATE' | 'UPDATE';
  subResource?: string;
  object: V1Pod;
  oldObject: V1Pod | null;
  namespace: string;
}

/** rollcall's verdict: the checks (by PodSecurity's names) of the policies that deny. */
function rollcall(
  policies: readonly LibraryPolicy[],
  atRestricted: boolean,
  request: PodRequest,
): Verdict & { denials: string[] } {
  const review = {
    uid: '00000000-0000-0000-0000-000000000000',
    kind: { group: '', version: 'v1', kind: 'Pod' },
    resource: { group: '', version: 'v1', resource: 'pods' },
    ...(request.subResource && { subResource: request.subResource }),
    requestKind: { group: '', version: 'v1', kind: 'Pod' },
    requestResource: { group: '', version: 'v1', resource: 'pods' },
    name: request.object.metadata?.name,
    namespace: request.namespace,
    operation: request.operation,
    userInfo: { username: 'pod-security-differential' },
    object: request.object,
    oldObject: request.oldObject,
    dryRun: true,
  };
  const reasons = new Set<string>();
  const denials: string[] = [];
  for (const policy of policies) {
    let verdict;
    try {
      verdict = evaluatePolicy(
        policy.compiled,
        { request: JSON.parse(JSON.stringify(review)), params: null, namespaceObject: null },
        { failurePolicy: policy.failurePolicy },
      );
    } catch (err) {
      if (err instanceof EvaluationError)
        throw new Error(`${policy.name}: ${err.message}`, { cause: err });
      throw err;
    }
    if (verdict.allowed) continue;
    assert.equal(verdict.code, 403, `${policy.name} denies with 403 Forbidden, as PodSecurity`);
    denials.push(`${policy.name}: ${verdict.message}`);
    reasons.add((atRestricted && REPLACED_AT_RESTRICTED[policy.name]) || REASON[policy.name]!);
  }
  return { reasons: [...reasons].sort(), denials };
}

// ---------------------------------------------------------------- the test

interface Observed {
  name: string;
  /** Why the case could not be observed (the apiserver refused the pod, a policy failed). */
  error?: string;
  exercises: Control[];
  podSecurity: { baseline: Verdict; restricted: Verdict };
  rollcall: {
    baseline: Verdict & { denials: string[] };
    restricted: Verdict & { denials: string[] };
  };
}

const withName = (p: V1Pod, name: string): V1Pod => ({
  ...structuredClone(p),
  metadata: { ...structuredClone(p.metadata), name },
});
/** A pod stored for real, kept from scheduling (its nodeName would change under the updates). */
const stored = (p: V1Pod, name: string): V1Pod => {
  const copy = withName(p, name);
  copy.spec!.schedulingGates = [{ name: 'rollcall.dev/hold' }];
  return copy;
};
/** A copy of `p` (as JSON, as a webhook receives it) in `namespace`. */
const inNamespace = (p: V1Pod, namespace: string): V1Pod =>
  JSON.parse(JSON.stringify({ ...p, metadata: { ...p.metadata, namespace } })) as V1Pod;

/** The pod as the apiserver admits it (defaulted), from a dry run in the unlabelled namespace. */
async function admitted(
  name: string,
  what: string,
  method: 'POST' | 'PUT',
  path: string,
  body: V1Pod,
) {
  const mirrored = await dryRun(method, path, body);
  if (!mirrored.ok)
    throw new Error(
      `${name}: the apiserver refuses the ${what}: ${mirrored.code} ${mirrored.message}`,
    );
  return mirrored.object;
}

/**
 * A case observed: PodSecurity's verdicts at both levels, and rollcall's on the same request
 * (`request(namespace)`) in the namespaces of those levels, Baseline alone and with Restricted.
 */
function compared(
  name: string,
  exercises: Control[],
  podSecurity: Observed['podSecurity'],
  request: (namespace: string) => PodRequest,
  namespaces: { baseline: string; restricted: string },
): Observed {
  return {
    name,
    exercises,
    podSecurity,
    rollcall: {
      baseline: rollcall(BASELINE, false, request(namespaces.baseline)),
      restricted: rollcall([...BASELINE, ...RESTRICTED], true, request(namespaces.restricted)),
    },
  };
}
const levels = { baseline: NS.baseline, restricted: NS.restricted };

/** Runs one case; a failure is recorded for its own test instead of stopping the others. */
const observe =
  <C extends { name: string; exercises?: Control[] }>(fn: (c: C) => Promise<Observed>) =>
  async (c: C): Promise<Observed> => {
    try {
      return await fn(c);
    } catch (err) {
      const empty = { reasons: [], denials: [] };
      return {
        name: c.name,
        exercises: c.exercises ?? [],
        error: err instanceof Error ? err.message : String(err),
        podSecurity: { baseline: empty, restricted: empty },
        rollcall: { baseline: empty, restricted: empty },
      };
    }
  };

describe('the Pod Security library agrees with the apiserver’s PodSecurity admission', () => {
  const observed: Observed[] = [];
  const unobservable = new Map<string, { code: number; message: string }>();

  before(
    async () => {
      const createNamespace = (name: string, labels: Record<string, string> = {}) =>
        requestJson(api, 'POST', '/api/v1/namespaces', {
          body: { apiVersion: 'v1', kind: 'Namespace', metadata: { name, labels } },
        });
      await Promise.all([
        createNamespace(NS.mirror),
        createNamespace(NS.baseline, level('baseline')),
        createNamespace(NS.restricted, level('restricted')),
        createNamespace(NS.updateBaseline),
        createNamespace(NS.updateRestricted),
      ]);

      // Creates: the defaulted pod, then both levels' verdicts, for each case.
      const creates = await mapLimit(
        CREATE_CASES,
        6,
        observe(async (c: CreateCase): Promise<Observed> => {
          const body = withName(c.pod, c.name);
          const object = await admitted(c.name, 'pod', 'POST', `${ns(NS.mirror)}/pods`, body);
          const [baseline, restrictedVerdict] = await Promise.all([
            podSecurity('POST', `${ns(NS.baseline)}/pods`, body),
            podSecurity('POST', `${ns(NS.restricted)}/pods`, body),
          ]);
          const at = (namespace: string): PodRequest => ({
            operation: 'CREATE',
            object: inNamespace(object, namespace),
            oldObject: null,
            namespace,
          });
          const verdicts = { baseline, restricted: restrictedVerdict };
          return compared(c.name, c.exercises, verdicts, at, levels);
        }),
      );
      observed.push(...creates);

      // Ephemeral containers: one stored base pod per case in each namespace, then a dry-run
      // update of its pods/ephemeralcontainers subresource.
      const ephemerals = await mapLimit(
        EPHEMERAL_CASES,
        3,
        observe(async (c: EphemeralCase): Promise<Observed> => {
          const base = stored(EPHEMERAL_BASE, c.name);
          const [mirrorPod] = await Promise.all(
            [NS.mirror, NS.baseline, NS.restricted].map(
              (namespace) =>
                requestJson(api, 'POST', `${ns(namespace)}/pods`, { body: base }) as Promise<V1Pod>,
            ),
          );
          const withEphemeral = (namespace: string): V1Pod => ({
            ...withName(base, c.name),
            metadata: { name: c.name, namespace },
            spec: {
              ...structuredClone(base.spec!),
              ephemeralContainers: [structuredClone(c.ephemeral)],
            },
          });
          const path = (namespace: string) => `${ns(namespace)}/pods/${c.name}/ephemeralcontainers`;
          const object = await admitted(
            c.name,
            'update',
            'PUT',
            path(NS.mirror),
            withEphemeral(NS.mirror),
          );
          const [baseline, restrictedVerdict] = await Promise.all([
            podSecurity('PUT', path(NS.baseline), withEphemeral(NS.baseline)),
            podSecurity('PUT', path(NS.restricted), withEphemeral(NS.restricted)),
          ]);
          const at = (namespace: string): PodRequest => ({
            operation: 'UPDATE',
            subResource: 'ephemeralcontainers',
            object: inNamespace(object, namespace),
            oldObject: inNamespace(mirrorPod!, namespace),
            namespace,
          });
          const verdicts = { baseline, restricted: restrictedVerdict };
          return compared(c.name, c.exercises, verdicts, at, levels);
        }),
      );
      observed.push(...ephemerals);

      // Updates of a legacy pod: stored before the namespaces got their levels.
      const legacyNamespaces = [NS.mirror, NS.updateBaseline, NS.updateRestricted];
      await Promise.all(
        legacyNamespaces.map((namespace) =>
          requestJson(api, 'POST', `${ns(namespace)}/pods`, { body: stored(LEGACY_POD, 'legacy') }),
        ),
      );
      // Then the levels (PodSecurity admits the label change, warning about the pod).
      for (const [name, value] of [
        [NS.updateBaseline, 'baseline'],
        [NS.updateRestricted, 'restricted'],
      ] as const) {
        const namespace = (await requestJson(api, 'GET', `/api/v1/namespaces/${name}`)) as {
          metadata: { labels?: Record<string, string> };
        };
        namespace.metadata.labels = { ...namespace.metadata.labels, ...level(value) };
        await requestJson(api, 'PUT', `/api/v1/namespaces/${name}`, { body: namespace });
      }
      for (const c of UPDATE_CASES) {
        const current = async (namespace: string) => {
          const p = (await requestJson(api, 'GET', `${ns(namespace)}/pods/legacy`)) as V1Pod;
          delete p.metadata!.resourceVersion; // an unconditional update
          return p;
        };
        const [mirrorOld, oldB, oldR] = await Promise.all(legacyNamespaces.map(current));
        const changed = (p: V1Pod) => {
          const copy = structuredClone(p);
          c.change(copy);
          return copy;
        };
        const object = await admitted(
          c.name,
          'update',
          'PUT',
          `${ns(NS.mirror)}/pods/legacy`,
          changed(mirrorOld!),
        );
        const [baseline, restrictedVerdict] = await Promise.all([
          podSecurity('PUT', `${ns(NS.updateBaseline)}/pods/legacy`, changed(oldB!)),
          podSecurity('PUT', `${ns(NS.updateRestricted)}/pods/legacy`, changed(oldR!)),
        ]);
        const at = (namespace: string): PodRequest => ({
          operation: 'UPDATE',
          object: inNamespace(object, namespace),
          oldObject: inNamespace(mirrorOld!, namespace),
          namespace,
        });
        const verdicts = { baseline, restricted: restrictedVerdict };
        observed.push(
          compared(c.name, [], verdicts, at, {
            baseline: NS.updateBaseline,
            restricted: NS.updateRestricted,
          }),
        );
      }

      // What the API refuses before PodSecurity runs.
      await mapLimit(UNOBSERVABLE, 4, async (u) => {
        const answer = await dryRun('POST', `${ns(NS.mirror)}/pods`, withName(u.pod, u.name));
        unobservable.set(u.name, answer.ok ? { code: 201, message: 'created' } : answer);
      });
    },
    { timeout: 120_000 },
  );

  after(async () => {
    await Promise.all(
      Object.values(NS).map((name) =>
        requestJson(api, 'DELETE', `/api/v1/namespaces/${name}`).catch(() => undefined),
      ),
    );
  });

  test('every library policy loads, applies to pods and their ephemeral containers, and names a PodSecurity check', () => {
    for (const policy of [...BASELINE, ...RESTRICTED]) {
      assert.ok(REASON[policy.name], `${policy.name} has no PodSecurity check in REASON`);
      const resources = policy.rules.flatMap((r) => r.resources);
      const operations = policy.rules.flatMap((r) => r.operations);
      assert.deepEqual(
        [resources.includes('pods'), resources.includes('pods/ephemeralcontainers')],
        [true, true],
        `${policy.name}: rules`,
      );
      assert.ok(
        operations.includes('CREATE') && operations.includes('UPDATE'),
        `${policy.name}: operations`,
      );
    }
    assert.equal(BASELINE.length, 12);
    assert.equal(RESTRICTED.length, 7);
  });

  test('the corpus has at least 40 pods and covers every control in both directions', () => {
    assert.ok(observed.length >= 40, `${observed.length} cases`);
    assert.equal(new Set(observed.map((o) => o.name)).size, observed.length, 'unique names');
    const missing: string[] = [];
    for (const control of Object.keys(REASON)) {
      const atRestricted = control.startsWith('pss-restricted-');
      const reason = REASON[control]!;
      const verdictOf = (o: Observed) =>
        atRestricted ? o.podSecurity.restricted : o.podSecurity.baseline;
      const exercised = observed.filter((o) => o.exercises.includes(control));
      if (!exercised.some((o) => verdictOf(o).reasons.includes(reason)))
        missing.push(`${control}: no pod it denies`);
      if (!exercised.some((o) => !verdictOf(o).reasons.includes(reason)))
        missing.push(`${control}: no pod setting its fields that it allows`);
    }
    // Baseline's proc-mount control cannot fail on a valid pod (see UNOBSERVABLE).
    assert.deepEqual(missing, ['pss-baseline-proc-mount: no pod it denies']);
    // Init and ephemeral containers are judged too.
    const ephemeralDenied = observed.filter(
      (o) => o.name.startsWith('ephemeral-') && o.podSecurity.baseline.reasons.length > 0,
    );
    assert.ok(ephemeralDenied.length >= 2, 'ephemeral containers denied at baseline');
  });

  test('what only an invalid pod could show is refused by the apiserver before PodSecurity', () => {
    for (const u of UNOBSERVABLE) {
      const answer = unobservable.get(u.name);
      assert.equal(answer?.code, 422, `${u.name} (${u.reason}): ${answer?.message}`);
    }
  });

  for (const name of [
    ...CREATE_CASES.map((c) => c.name),
    ...EPHEMERAL_CASES.map((c) => c.name),
    ...UPDATE_CASES.map((c) => c.name),
  ]) {
    test(`${name}: rollcall's policies deny for the checks PodSecurity names, at both levels`, () => {
      const o = observed.find((x) => x.name === name);
      assert.ok(o, `${name} was not observed`);
      assert.equal(o.error, undefined, `${name} could not be observed`);
      if (process.env.ROLLCALL_CONFORMANCE_LOG)
        console.log(
          `${name}\n  baseline   ${JSON.stringify(o.podSecurity.baseline.reasons)} ${JSON.stringify(o.rollcall.baseline.denials)}\n  restricted ${JSON.stringify(o.podSecurity.restricted.reasons)} ${JSON.stringify(o.rollcall.restricted.denials)}`,
        );
      assert.deepEqual(
        { baseline: o.rollcall.baseline.reasons, restricted: o.rollcall.restricted.reasons },
        { baseline: o.podSecurity.baseline.reasons, restricted: o.podSecurity.restricted.reasons },
        `rollcall (actual) vs PodSecurity (expected); rollcall's denials: ${JSON.stringify([...o.rollcall.restricted.denials])}`,
      );
    });
  }
});
