// rollcall's Redis clients on Sentinel across a failover, a duplicate among them (BullMQ's
// blocking connections).
// - When the Sentinel a client asks hangs through the failover, as one on the dead primary's
//   node would, every client must end up on the new primary. ioredis 5.11 ends such a client
//   for good ("Connection is closed"): the failover announcement closes its connector while it
//   waits for that Sentinel's answer (lib/redis/client.ts, followingFailovers).
// - A client closed while the primary is down must stay closed: what reconnects the first
//   must not reopen it, or a process would never exit.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { startSentinelGroup, redisCommand } from '../../../tooling/cluster/redis-groups.ts';
import { createRedis, ready } from '../../../control-plane/queue/connection.ts';
import { testCluster } from '../../support/kube.ts';
import { waitFor } from '../../support/poll.ts';

/** A Sentinel group and three ready clients on it, all stopped after the test. */
async function groupWithClients(name: string) {
  const group = await startSentinelGroup({ dir: join(testCluster().dir, name) });
  const worker = createRedis(group.url, 'worker') as Redis;
  const clients = {
    producer: createRedis(group.url, 'producer') as Redis,
    worker,
    'worker duplicate': worker.duplicate(),
  };
  after(async () => {
    for (const c of Object.values(clients)) c.disconnect();
    await group.stop();
  });
  for (const c of Object.values(clients)) {
    c.on('error', () => {}); // the kill makes them complain; what counts is where they end up
    await ready(c);
  }
  return { group, clients };
}

test(
  'on Sentinel, every client follows a failover during which the Sentinel it asks hangs',
  { timeout: 120_000 },
  async () => {
    const { group, clients } = await groupWithClients('queue-sentinel');
    // Each client asks the first Sentinel of the URL first: it stops answering, the primary
    // dies, and the two others promote a replica and announce it.
    const [asked, other] = group.sentinels;
    const old = group.servers[0]!.port;
    process.kill(asked!.pid, 'SIGSTOP');
    await group.servers[0]!.kill();
    // The port the two others name once they have promoted a replica (waitFor returns it).
    const primary = await waitFor(
      async () => {
        const [, port] = (await redisCommand(
          other!.port,
          'SENTINEL',
          'GET-MASTER-ADDR-BY-NAME',
          group.masterName,
        )) as string[];
        return Number(port) !== old && Number(port);
      },
      30_000,
      'the two answering Sentinels to promote a replica',
    );
    await sleep(500); // the announcement reaches the clients
    process.kill(asked!.pid, 'SIGCONT');

    for (const [name, c] of Object.entries(clients)) {
      const wrote = await waitFor(
        async () => (await c.set(`follows:${name}`, 'yes')) === 'OK',
        20_000,
        `the ${name} client to write`,
      ).catch(() => false);
      assert.ok(wrote, `the ${name} client never wrote again (its status: ${c.status})`);
      assert.equal(await redisCommand(primary, 'GET', `follows:${name}`), 'yes');
    }
  },
);

test(
  'on Sentinel, a client closed while the primary is down stays closed after the failover',
  { timeout: 120_000 },
  async () => {
    const { group, clients } = await groupWithClients('queue-sentinel-closed');
    const old = group.servers[0]!.port;
    await group.servers[0]!.kill();
    await waitFor(
      async () => Object.values(clients).every((c) => c.status !== 'ready'),
      10_000,
      'the clients to see the primary gone',
    );
    // Closed as rollcall closes them; the worker has a command waiting for a primary, so its
    // quit waits too, and ioredis goes on reconnecting meanwhile.
    clients.worker.get('pending').catch(() => {});
    const closed = Promise.all(
      Object.values(clients).map((c) => c.quit().catch(() => c.disconnect())),
    );
    const primary = await group.waitForFailover(old);
    await closed;
    await sleep(3000); // time for a client reopened by mistake to connect
    const list = String(await redisCommand(primary, 'CLIENT', 'LIST'));
    const ours = list
      .split('\n')
      // Plain clients without a name, but for this CLIENT LIST: Sentinels name theirs,
      // replicas are flagged S.
      .filter((line) => / name= .* flags=N /.test(line) && !line.includes('cmd=client|list'));
    assert.deepEqual(
      ours,
      [],
      'clients closed before the failover are connected to the new primary',
    );
  },
);
