import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { agentPodSchema, type AgentPod } from '../../../tooling/cluster/node-agent/pod.ts';
import {
  apiTime,
  nextPodIp,
  podStatus,
  statusDiffers,
  type ContainerPhase,
} from '../../../tooling/cluster/node-agent/status.ts';

const T0 = '2026-12-01T10:00:00Z';
const T1 = '2026-12-01T10:00:05Z';

function pod(status?: Record<string, unknown>): AgentPod {
  return agentPodSchema.parse({
    metadata: { name: 'p', namespace: 'ns', uid: 'u' },
    spec: {
      nodeName: 'kwok-node-0',
      containers: [{ name: 'policy-server', image: 'rollcall:0.1.0' }],
    },
    ...(status ? { status } : {}),
  });
}

const running = (ready: boolean): ContainerPhase => ({
  state: 'running',
  startedAt: T0,
  ready,
  pid: 42,
});

function statusOf(p: AgentPod, phase: ContainerPhase, now = T1) {
  return podStatus({
    pod: p,
    container: p.spec.containers[0]!,
    phase,
    podIP: '10.244.0.2',
    startTime: T0,
    now,
  });
}

const conditionStatus = (s: ReturnType<typeof statusOf>) =>
  Object.fromEntries(s.conditions.map((c) => [c.type, c.status]));

describe('podStatus', () => {
  test('reads Running and Ready once the probe passes', () => {
    const s = statusOf(pod(), running(true));
    assert.equal(s.phase, 'Running');
    assert.deepEqual(conditionStatus(s), {
      PodScheduled: 'True',
      Initialized: 'True',
      ContainersReady: 'True',
      Ready: 'True',
    });
    assert.deepEqual(s.containerStatuses[0]?.state, { running: { startedAt: T0 } });
    assert.equal(s.containerStatuses[0]?.ready, true);
    assert.equal(s.containerStatuses[0]?.started, true);
    assert.equal(s.podIP, '10.244.0.2');
    assert.deepEqual(s.podIPs, [{ ip: '10.244.0.2' }]);
  });

  test('reads Running but not Ready while the probe fails, saying which container', () => {
    const s = statusOf(pod(), running(false));
    assert.equal(s.phase, 'Running');
    const ready = s.conditions.find((c) => c.type === 'Ready');
    assert.equal(ready?.status, 'False');
    assert.equal(ready?.reason, 'ContainersNotReady');
    assert.match(ready?.message ?? '', /policy-server/);
  });

  test('reads Pending with the waiting reason while the process cannot start', () => {
    const s = statusOf(pod(), {
      state: 'waiting',
      reason: 'ContainerCreating',
      message: 'secret "x" not found',
    });
    assert.equal(s.phase, 'Pending');
    assert.deepEqual(s.containerStatuses[0]?.state, {
      waiting: { reason: 'ContainerCreating', message: 'secret "x" not found' },
    });
    assert.equal(conditionStatus(s).Ready, 'False');
  });

  test('keeps lastTransitionTime while a condition keeps its status, and moves it on a change', () => {
    const first = statusOf(pod(), running(false), T0);
    const again = statusOf(pod({ conditions: first.conditions }), running(false), T1);
    assert.ok(again.conditions.every((c) => c.lastTransitionTime === T0));
    const ready = statusOf(pod({ conditions: first.conditions }), running(true), T1);
    const time = (type: string) =>
      ready.conditions.find((c) => c.type === type)?.lastTransitionTime;
    assert.equal(time('Ready'), T1);
    assert.equal(time('Initialized'), T0);
  });

  test("keeps the scheduler's PodScheduled condition and conditions it does not own", () => {
    const scheduled = {
      type: 'PodScheduled',
      status: 'True',
      lastTransitionTime: '2026-01-01T00:00:00Z',
    };
    const other = { type: 'DisruptionTarget', status: 'False', lastTransitionTime: T0 };
    const s = statusOf(pod({ conditions: [scheduled, other] }), running(true));
    assert.deepEqual(s.conditions[0], scheduled);
    assert.ok(s.conditions.some((c) => c.type === 'DisruptionTarget'));
  });

  test('keeps the startTime a pod already has', () => {
    assert.equal(
      statusOf(pod({ startTime: '2025-05-05T05:05:05Z' }), running(true)).startTime,
      '2025-05-05T05:05:05Z',
    );
    assert.equal(statusOf(pod(), running(true)).startTime, T0);
  });
});

describe('statusDiffers', () => {
  test('is false when the pod already says what the agent would write', () => {
    const desired = statusOf(pod(), running(true));
    // The apiserver adds fields of its own (qosClass, lastProbeTime: null, lastState: {}).
    const echoed = JSON.parse(JSON.stringify(desired)) as typeof desired;
    const written = pod({
      ...echoed,
      qosClass: 'BestEffort',
      conditions: echoed.conditions.map((c) => ({ ...c, lastProbeTime: null })),
      containerStatuses: echoed.containerStatuses.map((s) => ({ ...s, lastState: {} })),
    });
    assert.equal(
      statusDiffers(written, statusOf(written, running(true), '2026-12-01T11:00:00Z')),
      false,
    );
  });

  test('is true when readiness changed', () => {
    const written = pod(JSON.parse(JSON.stringify(statusOf(pod(), running(true)))));
    assert.equal(statusDiffers(written, statusOf(written, running(false))), true);
  });

  test('is true for a pod kwok or nobody has written yet', () => {
    assert.equal(statusDiffers(pod(), statusOf(pod(), running(false))), true);
  });
});

describe('apiTime', () => {
  test('drops fractions of a second, as the apiserver stores timestamps', () => {
    assert.equal(apiTime(new Date('2026-12-01T10:00:00.123Z')), '2026-12-01T10:00:00Z');
  });
});

describe('nextPodIp', () => {
  test('gives the first free address of 10.244.0.0/16, skipping .0 and .255', () => {
    assert.equal(nextPodIp(new Set()), '10.244.0.2');
    assert.equal(nextPodIp(new Set(['10.244.0.2', '10.244.0.3'])), '10.244.0.4');
    const full = new Set(Array.from({ length: 254 }, (_, i) => `10.244.0.${i + 1}`));
    assert.equal(nextPodIp(full), '10.244.1.1');
  });
});
