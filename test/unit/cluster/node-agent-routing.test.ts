import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  parseConnectTarget,
  pick,
  route,
  type AgentService,
  type Backend,
} from '../../../tooling/cluster/node-agent/routing.ts';

const service: AgentService = {
  metadata: { name: 'policy-server-default', namespace: 'rollcall-system' },
  spec: {
    clusterIP: '10.0.0.50',
    clusterIPs: ['10.0.0.50'],
    selector: { 'rollcall.dev/policy-server': 'default' },
    ports: [{ port: 443 }],
  },
};

function backend(name: string, more: Partial<Backend> = {}): Backend {
  return {
    namespace: 'rollcall-system',
    name,
    labels: { 'rollcall.dev/policy-server': 'default' },
    podIP: `10.244.0.${name.length}`,
    ready: true,
    port: 40000 + name.length,
    ...more,
  };
}

describe('parseConnectTarget', () => {
  test('reads an IPv4 or bracketed IPv6 address with its port', () => {
    assert.deepEqual(parseConnectTarget('10.0.0.50:443'), { host: '10.0.0.50', port: 443 });
    assert.deepEqual(parseConnectTarget('[fd00::1]:8443'), { host: 'fd00::1', port: 8443 });
  });

  test('refuses names, missing ports and out-of-range ports', () => {
    for (const bad of ['example.com:443', '10.0.0.50', '10.0.0.50:0', '10.0.0.50:70000', undefined])
      assert.equal(parseConnectTarget(bad), undefined, String(bad));
  });
});

describe('route', () => {
  test("reaches the Ready pods with a process that the Service's selector matches, in name order", () => {
    const r = route(
      { host: '10.0.0.50', port: 443 },
      [service],
      [
        backend('b'),
        backend('a'),
        backend('other', { labels: { app: 'x' } }),
        backend('elsewhere', { namespace: 'default' }),
      ],
    );
    assert.ok('candidates' in r);
    assert.equal(r.key, 'service/rollcall-system/policy-server-default');
    assert.deepEqual(
      r.candidates.map((b) => b.name),
      ['a', 'b'],
    );
  });

  test('leaves out pods that are not Ready or have no process', () => {
    const r = route(
      { host: '10.0.0.50', port: 443 },
      [service],
      [
        backend('ready'),
        backend('unready', { ready: false }),
        backend('dead', { port: undefined }),
      ],
    );
    assert.ok('candidates' in r);
    assert.deepEqual(
      r.candidates.map((b) => b.name),
      ['ready'],
    );
  });

  test('says why nothing can answer', () => {
    const target = { host: '10.0.0.50', port: 443 };
    assert.match(errorOf(route(target, [service], [])), /selects no pod/);
    assert.match(
      errorOf(route(target, [service], [backend('a', { ready: false })])),
      /no ready pod .*1 selected/,
    );
    assert.match(
      errorOf(route({ host: '10.0.0.50', port: 80 }, [service], [backend('a')])),
      /no port 80/,
    );
    assert.match(
      errorOf(route({ host: '10.0.0.99', port: 443 }, [service], [backend('a')])),
      /no Service has cluster IP 10\.0\.0\.99/,
    );
    const noSelector = { ...service, spec: { ...service.spec, selector: null } };
    assert.match(errorOf(route(target, [noSelector], [backend('a')])), /no selector/);
  });

  test('reaches a pod by its pod IP', () => {
    const r = route({ host: '10.244.0.1', port: 8443 }, [service], [backend('a'), backend('bb')]);
    assert.ok('candidates' in r);
    assert.deepEqual(
      r.candidates.map((b) => b.name),
      ['a'],
    );
  });
});

describe('pick', () => {
  test('takes turns over the candidates', () => {
    const names = [0, 1, 2, 3, 4].map((turn) => pick(['a', 'b', 'c'], turn));
    assert.deepEqual(names, ['a', 'b', 'c', 'a', 'b']);
  });
});

function errorOf(r: ReturnType<typeof route>): string {
  assert.ok('error' in r, 'expected no route');
  return r.error;
}
