// Replicated Redis on loopback, for the tests of rollcall on Redis Sentinel and Redis Cluster:
// 3 redis-server + 3 redis-sentinel, or a Redis Cluster of 3 primaries. Every process binds
// 127.0.0.1 on free ports, persists nothing and logs into its group's directory.

import { spawn } from 'node:child_process';
import { closeSync, mkdirSync, openSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { freePort } from './ports.ts';
import {
  ensureRedisSentinel,
  ensureRedisServer,
  redisServerArgs,
  stopChild,
  waitForPing,
} from './redis.ts';

/** One redis-server or redis-sentinel process of a group. */
export interface RedisNodeProcess {
  name: string;
  port: number;
  pid: number;
  /** SIGKILL: the process dies mid-whatever, its data with it. */
  kill(): Promise<void>;
  /** SIGTERM, SIGKILL after 5 s. */
  stop(): Promise<void>;
}

export interface RedisGroupOptions {
  /** Where each process gets its working directory and `<name>.log`. */
  dir: string;
  log?: (line: string) => void;
}

/**
 * A process's working directory, emptied: a Cluster node's nodes.conf left by an earlier run
 * (same test directory) would bring back its old slots and peers ("Slot 0 is already busy").
 */
function emptyDir(dir: string): string {
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  return dir;
}

/** Spawns a long-lived Redis process logging to `<dir>/<name>.log` and waits for its PONG. */
async function spawnNode(
  command: string,
  args: string[],
  port: number,
  dir: string,
  name: string,
): Promise<RedisNodeProcess> {
  const logFile = join(dir, `${name}.log`);
  const out = openSync(logFile, 'a');
  const child = spawn(command, args, { stdio: ['ignore', out, out] });
  closeSync(out);
  try {
    await waitForPing(port, child);
  } catch (err) {
    child.kill('SIGKILL');
    throw new Error(`${name} did not start (see ${logFile}): ${(err as Error).message}`);
  }
  return {
    name,
    port,
    pid: child.pid ?? 0,
    stop: () => stopChild(child),
    kill: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGKILL');
      await exited;
    },
  };
}

/** Sends one command to 127.0.0.1:port over a fresh connection and returns the reply. */
export async function redisCommand(port: number, ...args: (string | number)[]): Promise<unknown> {
  const client = new Redis({ host: '127.0.0.1', port, lazyConnect: true, maxRetriesPerRequest: 1 });
  client.on('error', () => {}); // a node that is down rejects the command below; that says it
  try {
    await client.connect();
    return await client.call(String(args[0]), ...args.slice(1).map(String));
  } finally {
    client.disconnect();
  }
}

async function until(what: string, check: () => Promise<boolean>, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check().catch(() => false))) {
    if (Date.now() > deadline)
      throw new Error(`timed out after ${timeoutMs / 1000} s waiting for ${what}`);
    await sleep(100);
  }
}

/** Starts processes one after the other; on a failure stops those already started. */
async function startAll(
  count: number,
  start: (i: number, started: RedisNodeProcess[]) => Promise<RedisNodeProcess>,
  started: RedisNodeProcess[] = [],
): Promise<RedisNodeProcess[]> {
  const mine: RedisNodeProcess[] = [];
  try {
    for (let i = 0; i < count; i++) mine.push(await start(i, mine));
  } catch (err) {
    await Promise.all([...started, ...mine].map((p) => p.stop()));
    throw err;
  }
  return mine;
}

export interface SentinelGroup {
  /** `redis+sentinel://127.0.0.1:P,127.0.0.1:P,127.0.0.1:P/<master name>`. */
  url: string;
  masterName: string;
  /** servers[0] is the primary at start; the two others replicate it. */
  servers: RedisNodeProcess[];
  sentinels: RedisNodeProcess[];
  /** The port of the primary the Sentinels name now. */
  primaryPort(): Promise<number>;
  /** Resolves once the Sentinels name a primary other than `port` and it answers as one. */
  waitForFailover(port: number, timeoutMs?: number): Promise<number>;
  /**
   * The primary stops feeding its replicas (their replication user is switched off there):
   * they keep what they have, and what the primary takes from now on exists only on it.
   */
  cutReplication(): Promise<void>;
  stop(): Promise<void>;
}

export interface SentinelGroupOptions extends RedisGroupOptions {
  /** Default `rollcall`. */
  masterName?: string;
  /** How long a primary may be silent before the Sentinels call it down. Default 2000 ms. */
  downAfterMs?: number;
}

/** Replicas authenticate as this user, so that a test can cut replication (cutReplication). */
const replication = ['--masteruser', 'replicator', '--masterauth', 'replicator'];
const replicationUser = ['--user', 'replicator', 'on', '>replicator', '~*', '&*', '+@all'];

/**
 * 3 redis-server (a primary and 2 replicas) and 3 Sentinels with quorum 2, on loopback.
 * Resolves once every Sentinel knows the two others and both replicas, so a failover works.
 * Sentinels ping every second: a down-after of 2 s, not 1, keeps a busy machine from failing
 * over a second time to a replica that is still syncing.
 */
export async function startSentinelGroup(opts: SentinelGroupOptions): Promise<SentinelGroup> {
  const log = opts.log ?? (() => {});
  const masterName = opts.masterName ?? 'rollcall';
  const [server, sentinel] = [await ensureRedisServer(log), await ensureRedisSentinel(log)];
  const servers = await startAll(3, async (i, started) => {
    const port = await freePort();
    const dir = emptyDir(join(opts.dir, `redis-${i}`));
    // Every server can become the primary: all have the replication user.
    const args = [...redisServerArgs(port, dir), ...replicationUser, ...replication];
    const primary = started[0]?.port;
    if (primary !== undefined) args.push('--replicaof', '127.0.0.1', String(primary));
    return spawnNode(server, args, port, opts.dir, `redis-${i}`);
  });
  const primary = servers[0]!.port;
  const sentinels = await startAll(
    3,
    async (i) => {
      const port = await freePort();
      const dir = emptyDir(join(opts.dir, `sentinel-${i}`));
      // A Sentinel rewrites its config file as it learns the group: each has its own.
      const config = join(dir, 'sentinel.conf');
      writeFileSync(
        config,
        [
          `port ${port}`,
          'bind 127.0.0.1',
          `dir ${dir}`,
          `sentinel monitor ${masterName} 127.0.0.1 ${primary} 2`,
          `sentinel down-after-milliseconds ${masterName} ${opts.downAfterMs ?? 2000}`,
          `sentinel failover-timeout ${masterName} 10000`,
          '',
        ].join('\n'),
      );
      return spawnNode(sentinel, [config], port, opts.dir, `sentinel-${i}`);
    },
    servers,
  );
  const stop = async () => {
    await Promise.all([...sentinels, ...servers].map((p) => p.stop()));
  };
  const ask = async (port: number, ...args: string[]) =>
    (await redisCommand(port, 'SENTINEL', ...args)) as unknown[];
  try {
    await until('both replicas to sync with the primary', async () => {
      const info = String(await redisCommand(primary, 'INFO', 'replication'));
      return (info.match(/state=online/g) ?? []).length === 2;
    });
    // Sentinels meet through the primary's hello channel, every 2 s.
    await until('every Sentinel to know the 2 others and both replicas', async () => {
      for (const s of sentinels) {
        const [peers, replicas] = [
          await ask(s.port, 'SENTINELS', masterName),
          await ask(s.port, 'REPLICAS', masterName),
        ];
        if (peers.length !== 2 || replicas.length !== 2) return false;
      }
      return true;
    });
  } catch (err) {
    await stop();
    throw err;
  }
  const url = `redis+sentinel://${sentinels.map((s) => `127.0.0.1:${s.port}`).join(',')}/${masterName}`;
  log(`Sentinel group ${masterName}: primary 127.0.0.1:${primary}, ${url}`);
  const primaryPort = async (): Promise<number> => {
    for (const s of sentinels) {
      const addr = await ask(s.port, 'GET-MASTER-ADDR-BY-NAME', masterName).catch(() => undefined);
      if (addr) return Number(addr[1]);
    }
    throw new Error('no Sentinel answers');
  };
  return {
    url,
    masterName,
    servers,
    sentinels,
    primaryPort,
    async waitForFailover(port, timeoutMs = 30_000) {
      let now = port;
      await until(
        `the Sentinels to promote a replica of 127.0.0.1:${port}`,
        async () => {
          now = await primaryPort();
          return now !== port && /role:master/.test(String(await redisCommand(now, 'INFO')));
        },
        timeoutMs,
      );
      return now;
    },
    async cutReplication() {
      const port = await primaryPort();
      await redisCommand(port, 'ACL', 'SETUSER', 'replicator', 'off');
      await redisCommand(port, 'CLIENT', 'KILL', 'USER', 'replicator');
    },
    stop,
  };
}

export interface RedisClusterGroup {
  /** `redis+cluster://` and the primaries' addresses (the seeds). */
  url: string;
  /** nodes[0..primaries-1] are the primaries at start; nodes[primaries + i] replicates nodes[i]. */
  nodes: RedisNodeProcess[];
  /** The node that serves `key`'s slot now, as the surviving nodes see it. */
  ownerOf(key: string): Promise<RedisNodeProcess>;
  stop(): Promise<void>;
}

/**
 * A Redis Cluster of `primaries` primaries, the 16384 slots split evenly, each with
 * `replicas` replicas (0 or more) that take over when it dies (after the 2 s node timeout).
 */
export async function startRedisCluster(
  opts: RedisGroupOptions & { primaries?: number; replicas?: number },
): Promise<RedisClusterGroup> {
  const log = opts.log ?? (() => {});
  const primaries = opts.primaries ?? 3;
  const count = primaries * (1 + (opts.replicas ?? 0));
  const server = await ensureRedisServer(log);
  const busPorts: number[] = [];
  const nodes = await startAll(count, async (i) => {
    const port = await freePort();
    // The bus port defaults to port + 10000, which may be taken or past 65535: pick one.
    const busPort = await freePort();
    busPorts.push(busPort);
    const dir = emptyDir(join(opts.dir, `cluster-${i}`));
    const args = [
      ...redisServerArgs(port, dir),
      ...['--cluster-enabled', 'yes', '--cluster-config-file', join(dir, 'nodes.conf')],
      ...['--cluster-port', String(busPort), '--cluster-node-timeout', '2000'],
    ];
    return spawnNode(server, args, port, opts.dir, `cluster-${i}`);
  });
  const stop = async () => {
    await Promise.all(nodes.map((p) => p.stop()));
  };
  const info = async (n: RedisNodeProcess) => String(await redisCommand(n.port, 'CLUSTER', 'INFO'));
  try {
    for (const [i, node] of nodes.entries()) {
      if (i < primaries) {
        const first = Math.floor((16384 * i) / primaries);
        const last = Math.floor((16384 * (i + 1)) / primaries) - 1;
        await redisCommand(node.port, 'CLUSTER', 'ADDSLOTSRANGE', first, last);
      }
      if (i > 0)
        await redisCommand(nodes[0]!.port, 'CLUSTER', 'MEET', '127.0.0.1', node.port, busPorts[i]!);
    }
    await until(`every node of the Cluster to know all ${count}`, async () =>
      (await Promise.all(nodes.map(info))).every((t) => t.includes(`cluster_known_nodes:${count}`)),
    );
    for (let i = primaries; i < count; i++) {
      const primaryId = String(await redisCommand(nodes[i % primaries]!.port, 'CLUSTER', 'MYID'));
      await redisCommand(nodes[i]!.port, 'CLUSTER', 'REPLICATE', primaryId);
    }
    await until('every node of the Cluster to be ok and every replica in sync', async () => {
      const ok = (await Promise.all(nodes.map(info))).every((t) => t.includes('cluster_state:ok'));
      const replicas = await Promise.all(
        nodes
          .slice(primaries)
          .map(async (n) => String(await redisCommand(n.port, 'INFO', 'replication'))),
      );
      return ok && replicas.every((r) => r.includes('master_link_status:up'));
    });
  } catch (err) {
    await stop();
    throw err;
  }
  const url = `redis+cluster://${nodes
    .slice(0, primaries)
    .map((n) => `127.0.0.1:${n.port}`)
    .join(',')}`;
  log(`Redis Cluster: ${url}`);
  return {
    url,
    nodes,
    async ownerOf(key) {
      for (const n of nodes) {
        const slot = await redisCommand(n.port, 'CLUSTER', 'KEYSLOT', key).catch(() => undefined);
        if (slot === undefined) continue; // this node is down: ask the next
        const shards = (await redisCommand(n.port, 'CLUSTER', 'SLOTS')) as [
          number,
          number,
          [string, number],
        ][];
        const shard = shards.find(([first, last]) => Number(slot) >= first && Number(slot) <= last);
        const owner = nodes.find((m) => m.port === shard?.[2][1]);
        if (owner) return owner;
      }
      throw new Error(`no node of the Cluster serves ${key}`);
    },
    stop,
  };
}
