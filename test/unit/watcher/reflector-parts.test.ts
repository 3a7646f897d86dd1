import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { leaseIsFree, microTime, type Lease } from '../../../control-plane/watcher/leader.ts';
import { KubeApiError } from '../../../lib/kube/api.ts';
import { classifyWatchEnd, diffStore, isGone, objectKey } from '../../../lib/kube/reflector.ts';
import { configMap } from './fake-apiserver.ts';

describe('objectKey', () => {
  test('is namespace/name for namespaced objects and name for cluster-scoped ones', () => {
    assert.equal(objectKey(configMap('a', '1')), 'ns/a');
    assert.equal(objectKey({ metadata: { name: 'node-1' } }), 'node-1');
  });
});

describe('diffStore', () => {
  const store = (...objs: ReturnType<typeof configMap>[]) =>
    new Map(objs.map((o) => [objectKey(o), o]));

  test('reports listed objects missing from the store as added', () => {
    const diff = diffStore(store(), [configMap('a', '1')]);
    assert.deepEqual(diff, { added: [configMap('a', '1')], updated: [], deleted: [] });
  });

  test('reports objects that vanished from the list as deleted, with their last known state', () => {
    const diff = diffStore(store(configMap('a', '1'), configMap('b', '2')), [configMap('a', '1')]);
    assert.deepEqual(diff, { added: [], updated: [], deleted: [configMap('b', '2')] });
  });

  test('reports an object whose resourceVersion changed as updated, old then new', () => {
    const diff = diffStore(store(configMap('a', '1', { v: 'old' })), [
      configMap('a', '5', { v: 'new' }),
    ]);
    assert.deepEqual(diff.updated, [
      [configMap('a', '1', { v: 'old' }), configMap('a', '5', { v: 'new' })],
    ]);
  });

  test('leaves out objects whose resourceVersion did not change', () => {
    const diff = diffStore(store(configMap('a', '1')), [configMap('a', '1')]);
    assert.deepEqual(diff, { added: [], updated: [], deleted: [] });
  });
});

describe('isGone', () => {
  test('recognises 410 and the Expired/Gone reasons', () => {
    assert.equal(
      isGone({ code: 410, reason: 'Expired', message: 'too old resource version: 1 (100)' }),
      true,
    );
    assert.equal(isGone({ reason: 'Gone' }), true);
    assert.equal(isGone({ code: 500, reason: 'InternalError' }), false);
    assert.equal(isGone(undefined), false);
  });
});

describe('classifyWatchEnd', () => {
  test('treats a normal end (null) as closed', () => {
    assert.equal(classifyWatchEnd(null), 'closed');
  });

  test('treats an HTTP 410 as gone, from any client that carries a statusCode', () => {
    assert.equal(classifyWatchEnd(Object.assign(new Error('Gone'), { statusCode: 410 })), 'gone');
    assert.equal(classifyWatchEnd(new KubeApiError(410, { code: 410, reason: 'Expired' })), 'gone');
  });

  test('treats every other failure as an error', () => {
    assert.equal(
      classifyWatchEnd(Object.assign(new Error('Forbidden'), { statusCode: 403 })),
      'error',
    );
    assert.equal(classifyWatchEnd(new Error('ECONNRESET')), 'error');
  });
});

describe('leaseIsFree', () => {
  const lease = (
    holderIdentity: string | undefined,
    renewTime: Date | undefined,
    leaseDurationSeconds = 15,
  ): Lease => ({
    metadata: { name: 'l' },
    spec: { holderIdentity, renewTime: renewTime && microTime(renewTime), leaseDurationSeconds },
  });
  const now = Date.parse('2030-01-01T00:00:30Z');

  test('is free without a holder', () => {
    assert.equal(leaseIsFree(lease(undefined, new Date(now)), now), true);
    assert.equal(leaseIsFree({ metadata: { name: 'l' } }, now), true);
  });

  test('is held while the last renewal is younger than the lease duration', () => {
    assert.equal(leaseIsFree(lease('a', new Date(now - 14_000)), now), false);
  });

  test('is free once the last renewal is older than the lease duration', () => {
    assert.equal(leaseIsFree(lease('a', new Date(now - 16_000)), now), true);
  });
});
