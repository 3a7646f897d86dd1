// One Redis client type for the three topologies --redis-url names: a single Redis, a primary
// found through Sentinels (ioredis follows failovers), and a Redis Cluster. Everything
// topology-specific lives here: the client, the key prefix, key listing and the primary's
// address; the rest of rollcall is the same code on all three.

import { readFileSync } from 'node:fs';
import type { ConnectionOptions } from 'node:tls';
import { Cluster, Redis, type RedisOptions } from 'ioredis';
import { parseRedisUrl, RedisUrlError, type RedisTarget } from './url.ts';

export type RedisClient = Redis | Cluster;

export function isCluster(client: RedisClient): client is Cluster {
  return (client as { isCluster?: boolean }).isCluster === true;
}

/**
 * True for Sentinel and Cluster clients: their primary can change to a replica that missed the
 * last writes (replication is asynchronous), so the watcher counts its writes there.
 */
export function isReplicated(client: RedisClient): boolean {
  return isCluster(client) || (client.options.sentinels?.length ?? 0) > 0;
}

/** A client for `url` (any form parseRedisUrl accepts) with the given per-connection options. */
export function createRedisClient(url: string, options: RedisOptions): RedisClient {
  return clientFor(parseRedisUrl(url), options);
}

function clientFor(target: RedisTarget, options: RedisOptions): RedisClient {
  switch (target.kind) {
    case 'single': {
      // rediss:// itself turns TLS on in ioredis; a CA file adds to what it trusts.
      const tls = target.caFile === undefined ? {} : { tls: tlsOptions(target.caFile) };
      return new Redis(target.url, { ...options, ...tls });
    }
    case 'sentinel': {
      const { sentinels, name, username, password, sentinelPassword, db } = target;
      const tls = target.tls ? tlsOptions(target.caFile) : undefined;
      return followingFailovers(
        new Redis({
          ...options,
          sentinels,
          name,
          db,
          ...(username === undefined ? {} : { username }),
          ...(password === undefined ? {} : { password }),
          ...(sentinelPassword === undefined ? {} : { sentinelPassword }),
          // TLS to the Sentinels (sentinelTLS, which their failover detector uses too) and to
          // the primary they name (tls, which ioredis applies only with the switch).
          ...(tls ? { tls, sentinelTLS: tls, enableTLSForSentinelMode: true } : {}),
          // Subscribe to the Sentinels' +switch-master and reconnect to the new primary at
          // once: a primary whose node vanished leaves a socket that never errors by itself.
          failoverDetector: true,
        }),
      );
    }
    case 'cluster': {
      const { nodes, username, password } = target;
      const tls = target.tls ? tlsOptions(target.caFile) : undefined;
      // The Cluster keeps its offline queue even for a producer: without it, a failover under
      // load often left a MULTI's commands queued on a live node, never written nor answered,
      // so the MULTI never settled (ioredis 5.11; a watcher write or a fan-out job hung for
      // good; test/integration/queue/cluster-failover.test.ts). Commands to a dead primary
      // still fail after the Cluster's redirections, within about 2 s.
      const { enableOfflineQueue: _, enableReadyCheck, ...perNode } = options;
      return new Cluster(nodes, {
        ...(enableReadyCheck === undefined ? {} : { enableReadyCheck }),
        // With TLS, connect to the seeds by the names given, not the addresses they resolve
        // to, so that their certificates are checked against those names.
        ...(tls ? { dnsLookup: (address, callback) => callback(null, address) } : {}),
        redisOptions: {
          ...perNode,
          ...(username === undefined ? {} : { username }),
          ...(password === undefined ? {} : { password }),
          ...(tls ? { tls } : {}),
        },
      });
    }
  }
}

/** Node's TLS options for every connection to Redis: the system's CAs, plus `caFile`'s. */
function tlsOptions(caFile: string | undefined): ConnectionOptions {
  if (caFile === undefined) return {};
  try {
    return { ca: readFileSync(caFile, 'utf8') };
  } catch (err) {
    throw new RedisUrlError(
      `--redis-url: cannot read the CA file ?caFile=${caFile}: ${(err as Error).message}`,
    );
  }
}

/**
 * A Sentinel client that rollcall did not close connects again when it ends. ioredis 5.11 ends
 * one for good when a failover is announced (+switch-master) while the client asks a Sentinel
 * for the primary: the detector closes the connector under that pending connect, which gives
 * up with "Connection is closed" and status `end`, refusing every later command. It fits a CI
 * run in which no Policy got a status after a failover; sentinel-failover.test.ts shows it.
 *
 * A client that is closed disconnects after `end` too: ioredis leaves the failover detector's
 * Sentinel subscriptions open after `quit()` (ioredis issue 1362), which keeps the process from
 * exiting. Both hold for the client's duplicates (BullMQ's blocking connections).
 */
function followingFailovers(client: Redis): Redis {
  let closing = false;
  const { connect, quit, disconnect, duplicate } = client;
  client.connect = (callback) => {
    // Reopened (BullMQ does so with a blocking connection); ioredis' own reconnects come from
    // `reconnecting` and keep a close asked for meanwhile.
    if (client.status === 'end') closing = false;
    return connect.call(client, callback);
  };
  client.quit = (callback) => {
    closing = true;
    return quit.call(client, callback);
  };
  client.disconnect = (reconnect = false) => {
    if (!reconnect) closing = true;
    disconnect.call(client, reconnect);
  };
  client.duplicate = (override) => followingFailovers(duplicate.call(client, override));
  client.on('end', () => {
    if (closing) client.disconnect();
    // After the other listeners have seen `end`: one may close it, or connect it itself.
    else
      setImmediate(() => !closing && client.status === 'end' && client.connect().catch(() => {}));
  });
  return client;
}

/**
 * The key prefix of the queue, the projections and the write bucket. On a Cluster it is a hash
 * tag (`{rollcall}`), so that every key lands in one slot and every MULTI and Lua script
 * stays legal; a single Redis or a Sentinel primary keeps the plain prefix.
 */
export function keyPrefix(client: RedisClient, prefix = 'rollcall'): string {
  return isCluster(client) && !/\{[^{}]+\}/.test(prefix) ? `{${prefix}}` : prefix;
}

/** Keys matching `pattern` on every primary (KEYS on a Cluster client would ask one random node). */
export async function keysMatching(client: RedisClient, pattern: string): Promise<string[]> {
  if (!isCluster(client)) return client.keys(pattern);
  const perNode = await Promise.all(client.nodes('master').map((node) => node.keys(pattern)));
  return [...new Set(perNode.flat())];
}

/**
 * `host:port` of the primary this client writes `key` to now, or undefined while it has no
 * connection. A Sentinel client's socket is the primary Sentinel named last; a Cluster's is
 * the node that owns the key's slot in the client's current slot table.
 */
export function primaryAddress(client: RedisClient, key: string): string | undefined {
  if (isCluster(client)) return client.slots[keySlot(key)]?.[0];
  if (client.status !== 'ready') return undefined;
  const { remoteAddress, remotePort } = client.stream ?? {};
  if (!remoteAddress || !remotePort) return undefined;
  return `${remoteAddress.includes(':') ? `[${remoteAddress}]` : remoteAddress}:${remotePort}`;
}

/** The Cluster slot of a key: CRC16 (XMODEM) of its hash tag, if any, modulo 16384. */
export function keySlot(key: string): number {
  const bytes = Buffer.from(key);
  const open = bytes.indexOf('{');
  let hashed = bytes;
  if (open >= 0) {
    const close = bytes.indexOf('}', open + 1);
    if (close > open + 1) hashed = bytes.subarray(open + 1, close);
  }
  let crc = 0;
  for (const byte of hashed) {
    crc ^= byte << 8;
    for (let i = 0; i < 8; i++)
      crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc % 16384;
}
