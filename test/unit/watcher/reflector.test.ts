import assert from 'node:assert/strict';
import { afterEach, describe, test } from 'node:test';
import type { KubernetesObject } from '@kubernetes/client-node';
import { Reflector, objectKey, type ReflectorOptions } from '../../../lib/kube/reflector.ts';
import {
  FakeApiServer,
  configMap,
  configMapList,
  expired,
  type FakeApiServerOptions,
} from './fake-apiserver.ts';
import { eventually } from '../../support/poll.ts';

/** Starts a reflector against a fake apiserver and records what it reports, as short strings. */
async function harness(
  fakeOptions: FakeApiServerOptions,
  options: Partial<ReflectorOptions<KubernetesObject>> = {},
) {
  const fake = await FakeApiServer.start(fakeOptions);
  const events: string[] = [];
  const metrics: string[] = [];
  const rv = (o: KubernetesObject) => o.metadata?.resourceVersion;
  const reflector = new Reflector<KubernetesObject>({
    api: fake.target(),
    path: '/api/v1/namespaces/ns/configmaps',
    backoff: { baseMs: 10, capMs: 50 },
    onAdd: (o) => void events.push(`add ${objectKey(o)}@${rv(o)}`),
    onUpdate: (old, o) => void events.push(`update ${objectKey(o)}@${rv(old)}→${rv(o)}`),
    onDelete: (o, unknown) =>
      void events.push(`delete ${objectKey(o)}${unknown ? ' (vanished)' : ''}`),
    onSynced: (all) => void events.push(`synced ${all.length}`),
    metrics: {
      watchRestarted: (reason) => void metrics.push(`restart:${reason}`),
      relisted: (reason) => void metrics.push(`relist:${reason}`),
    },
    ...options,
  });
  cleanups.push(async () => {
    await reflector.stop();
    await fake.close();
  });
  return { fake, reflector, events, metrics };
}

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

describe('Reflector against a scripted apiserver', () => {
  test('lists every page, delivers adds then onSynced, and watches from the list’s resourceVersion', async () => {
    const { fake, reflector, events } = await harness(
      {
        list: (q) =>
          q.get('continue') === 'page2'
            ? configMapList('10', [configMap('b', '7')])
            : configMapList('10', [configMap('a', '5')], 'page2'),
      },
      { pageSize: 1, labelSelector: 'app=x' },
    );
    reflector.start();
    await eventually('the watch', () => fake.watches.length === 1, 5_000);
    assert.deepEqual(events, ['add ns/a@5', 'add ns/b@7', 'synced 2']);
    assert.equal(reflector.hasSynced(), true);
    assert.deepEqual(
      fake.lists.map((q) => [q.get('limit'), q.get('continue'), q.get('labelSelector')]),
      [
        ['1', null, 'app=x'],
        ['1', 'page2', 'app=x'],
      ],
    );
    const watch = fake.watches[0]!;
    assert.equal(watch.get('resourceVersion'), '10');
    assert.equal(watch.get('allowWatchBookmarks'), 'true');
    assert.equal(watch.get('labelSelector'), 'app=x');
    const timeout = Number(watch.get('timeoutSeconds'));
    assert.ok(timeout >= 300 && timeout < 600, `timeoutSeconds ${timeout}`);
    // List items lack apiVersion/kind; the reflector fills them in.
    assert.equal(reflector.get('ns/a')?.kind, 'ConfigMap');
    assert.equal(reflector.get('ns/a')?.apiVersion, 'v1');
  });

  test('applies watch events to the store and delivers add, update and delete', async () => {
    const { reflector, events } = await harness({
      list: () => configMapList('10', [configMap('a', '5')]),
      watches: [
        (w) => {
          w.send('ADDED', configMap('b', '11'));
          w.send('MODIFIED', configMap('a', '12', { k: 'v' }));
          w.send('DELETED', configMap('b', '13'));
        },
      ],
    });
    reflector.start();
    await eventually('five events', () => events.length === 5, 5_000);
    assert.deepEqual(events, [
      'add ns/a@5',
      'synced 1',
      'add ns/b@11',
      'update ns/a@5→12',
      'delete ns/b',
    ]);
    assert.deepEqual(reflector.list().map(objectKey), ['ns/a']);
    assert.deepEqual((reflector.get('ns/a') as { data?: unknown }).data, { k: 'v' });
    assert.equal(reflector.resourceVersion, '13');
  });

  test('resumes a watch that ended normally from the last resourceVersion a bookmark reported', async () => {
    const { fake, reflector, metrics } = await harness({
      list: () => configMapList('10', []),
      watches: [
        (w) => {
          w.send('BOOKMARK', {
            kind: 'ConfigMap',
            apiVersion: 'v1',
            metadata: { resourceVersion: '42' },
          });
          w.end();
        },
      ],
    });
    reflector.start();
    await eventually('a second watch', () => fake.watches.length === 2, 5_000);
    assert.equal(fake.watches[1]!.get('resourceVersion'), '42');
    assert.equal(fake.lists.length, 1, 'no relist');
    assert.deepEqual(metrics, ['relist:initial', 'restart:closed']);
  });

  test('relists on a 410 ERROR event inside the stream and reports what changed meanwhile', async () => {
    let listed = 0;
    const { fake, reflector, events, metrics } = await harness({
      list: () =>
        ++listed === 1
          ? configMapList('10', [configMap('a', '5'), configMap('b', '6')])
          : configMapList('90', [configMap('a', '80'), configMap('c', '85')]),
      watches: [(w) => w.send('ERROR', expired('too old resource version: 10 (50)'))],
    });
    reflector.start();
    await eventually('the watch after the relist', () => fake.watches.length === 2, 5_000);
    assert.deepEqual(events, [
      'add ns/a@5',
      'add ns/b@6',
      'synced 2',
      'delete ns/b (vanished)',
      'add ns/c@85',
      'update ns/a@5→80',
      'synced 2',
    ]);
    assert.equal(fake.watches[1]!.get('resourceVersion'), '90');
    assert.deepEqual(metrics, ['relist:initial', 'restart:gone', 'relist:gone']);
  });

  test('relists when the watch request itself is answered with HTTP 410', async () => {
    const { fake, reflector, metrics } = await harness({
      list: () => configMapList('10', []),
      watches: [(w) => w.fail(410, { kind: 'Status', code: 410, reason: 'Gone' })],
    });
    reflector.start();
    await eventually('the watch after the relist', () => fake.watches.length === 2, 5_000);
    assert.equal(fake.lists.length, 2);
    assert.deepEqual(metrics, ['relist:initial', 'restart:gone', 'relist:gone']);
  });

  test('backs off instead of relisting in a tight loop when every fresh watch is answered with 410', async () => {
    const gone = (w: { send(type: string, object: unknown): void }) => w.send('ERROR', expired());
    const { fake, reflector } = await harness(
      { list: () => configMapList('10', []), watches: Array.from({ length: 50 }, () => gone) },
      { backoff: { baseMs: 50, capMs: 1_000, jitter: 0 } },
    );
    reflector.start();
    await new Promise((resolve) => setTimeout(resolve, 500));
    // 50 + 100 + 200 ms of backoff fit in 500 ms: at most five lists, not hundreds.
    assert.ok(fake.lists.length >= 3 && fake.lists.length <= 5, `${fake.lists.length} lists`);
  });

  test('keeps retrying a failing watch with growing delays and never stops', async () => {
    const fail = (status: number) => (w: { fail(status: number): void }) => w.fail(status);
    const { fake, reflector, metrics } = await harness(
      {
        list: () => configMapList('10', []),
        watches: [fail(500), fail(403), fail(500), fail(503)],
      },
      { backoff: { baseMs: 20, capMs: 1_000, jitter: 0 } },
    );
    const started = Date.now();
    reflector.start();
    await eventually('a fifth watch', () => fake.watches.length === 5, 5_000);
    // 20 + 40 + 80 + 160 ms of backoff before the fifth attempt.
    assert.ok(Date.now() - started >= 300, `retried after ${Date.now() - started} ms`);
    assert.deepEqual(metrics.slice(1), [
      'restart:error',
      'restart:error',
      'restart:error',
      'restart:error',
    ]);
    assert.ok(
      fake.watches.every((q) => q.get('resourceVersion') === '10'),
      'resumes from the same version',
    );
    assert.equal(fake.lists.length, 1, 'errors other than 410 do not relist');
  });

  test('retries a failing list until it succeeds', async () => {
    let attempts = 0;
    const { fake, reflector, events } = await harness({
      list: () =>
        ++attempts < 3
          ? { status: 500, body: { kind: 'Status', code: 500, message: 'etcd hiccup' } }
          : configMapList('10', [configMap('a', '1')]),
    });
    reflector.start();
    await eventually('the watch', () => fake.watches.length === 1, 5_000);
    assert.equal(attempts, 3);
    assert.deepEqual(events, ['add ns/a@1', 'synced 1']);
  });

  test('lists from the start again when a continue token expired', async () => {
    const { fake, reflector } = await harness(
      {
        list: (q) => {
          const token = q.get('continue');
          if (token === 'stale')
            return {
              status: 410,
              body: { kind: 'Status', code: 410, reason: 'Expired', message: 'continue too old' },
            };
          return fake.lists.length === 1
            ? configMapList('10', [configMap('a', '1')], 'stale')
            : configMapList('20', [configMap('a', '1')]);
        },
      },
      { pageSize: 1 },
    );
    reflector.start();
    await eventually('the watch', () => fake.watches.length === 1, 5_000);
    assert.deepEqual(
      fake.lists.map((q) => q.get('continue')),
      [null, 'stale', null],
    );
    assert.equal(fake.watches[0]!.get('resourceVersion'), '20');
  });

  test('aborts a watch that stays silent for staleAfterMs and resumes it', async () => {
    const { fake, reflector, metrics } = await harness(
      { list: () => configMapList('10', []) },
      { staleAfterMs: 150 },
    );
    reflector.start();
    await eventually('two restarts', () => fake.watches.length === 3, 5_000);
    assert.deepEqual(metrics.slice(0, 3), ['relist:initial', 'restart:stale', 'restart:stale']);
    await eventually('the stale watches to be closed', () => fake.openWatches <= 1, 1_000);
  });

  test('does not consider a watch that keeps delivering bookmarks stale', async () => {
    const { fake, reflector, metrics } = await harness(
      {
        list: () => configMapList('10', []),
        watches: [
          (w) => {
            let rv = 10;
            const timer = setInterval(() => {
              if (w.query && !fakeClosed)
                w.send('BOOKMARK', { metadata: { resourceVersion: String(++rv) } });
            }, 50);
            cleanups.push(async () => clearInterval(timer));
          },
        ],
      },
      { staleAfterMs: 200 },
    );
    let fakeClosed = false;
    cleanups.unshift(async () => void (fakeClosed = true));
    reflector.start();
    await new Promise((resolve) => setTimeout(resolve, 600));
    assert.equal(fake.watches.length, 1);
    assert.deepEqual(metrics, ['relist:initial']);
  });

  test('resumes from a seed without listing and relists when the seed’s version expired', async () => {
    const { fake, reflector, events } = await harness(
      {
        list: () => configMapList('90', [configMap('a', '5'), configMap('c', '85')]),
        watches: [(w) => w.send('ERROR', expired('too old resource version: 3'))],
      },
      { resumeFrom: { objects: [configMap('a', '5'), configMap('b', '3')], resourceVersion: '3' } },
    );
    assert.equal(reflector.hasSynced(), true);
    reflector.start();
    await eventually('the watch after the relist', () => fake.watches.length === 2, 5_000);
    assert.equal(fake.watches[0]!.get('resourceVersion'), '3');
    assert.deepEqual(events, ['delete ns/b (vanished)', 'add ns/c@85', 'synced 2']);
  });

  test('calls onResync periodically with every stored object', async () => {
    const resyncs: number[] = [];
    const { reflector } = await harness(
      { list: () => configMapList('10', [configMap('a', '1'), configMap('b', '2')]) },
      { resyncMs: 50, onResync: (all) => void resyncs.push(all.length) },
    );
    reflector.start();
    await eventually('two resyncs', () => resyncs.length >= 2, 5_000);
    assert.deepEqual(resyncs.slice(0, 2), [2, 2]);
  });

  test('delivers to async handlers one at a time, in order', async () => {
    const log: string[] = [];
    let active = 0;
    const { reflector } = await harness(
      {
        list: () => configMapList('10', []),
        watches: [
          (w) => ['a', 'b', 'c'].forEach((n, i) => w.send('ADDED', configMap(n, String(11 + i)))),
        ],
      },
      {
        onAdd: async (o) => {
          assert.equal(++active, 1, 'no overlap');
          await new Promise((resolve) => setTimeout(resolve, 20));
          log.push(o.metadata!.name!);
          active--;
        },
      },
    );
    reflector.start();
    await eventually('three adds', () => log.length === 3, 5_000);
    assert.deepEqual(log, ['a', 'b', 'c']);
  });

  test('keeps delivering after a handler throws', async () => {
    const failures: string[] = [];
    const added: string[] = [];
    const { reflector } = await harness(
      { list: () => configMapList('10', [configMap('a', '1'), configMap('b', '2')]) },
      {
        onAdd: (o) => {
          if (o.metadata?.name === 'a') throw new Error('boom');
          added.push(o.metadata!.name!);
        },
        metrics: { failed: (stage) => void failures.push(stage) },
      },
    );
    reflector.start();
    await eventually('the second add', () => added.length === 1, 5_000);
    assert.deepEqual(failures, ['handler']);
  });

  test('leaves no timer or socket behind after stop()', async () => {
    // Counts handles by type; earlier tests' sockets may still be closing, so compare as "no more than before".
    const handles = () => {
      const counts = new Map<string, number>();
      for (const type of process.getActiveResourcesInfo())
        counts.set(type, (counts.get(type) ?? 0) + 1);
      return counts;
    };
    const before = handles();
    const fake = await FakeApiServer.start({
      list: () => configMapList('10', [configMap('a', '1')]),
    });
    const reflector = new Reflector({
      api: fake.target(),
      path: '/api/v1/namespaces/ns/configmaps',
      resyncMs: 1_000,
      onResync: () => {},
    });
    cleanups.push(() => fake.close());
    reflector.start();
    await eventually('the watch', () => fake.openWatches === 1, 5_000);
    await reflector.stop();
    await eventually('the watch to close', () => fake.openWatches === 0, 2_000);
    await fake.close();
    await new Promise((resolve) => setTimeout(resolve, 20)); // handles are released a tick after close
    for (const [type, count] of handles())
      assert.ok(
        count <= (before.get(type) ?? 0),
        `${count} × ${type} left, ${before.get(type) ?? 0} before`,
      );
    assert.deepEqual(reflector.list().map(objectKey), ['ns/a'], 'the store survives stop()');
  });
});
