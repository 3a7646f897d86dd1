// The forms --redis-url takes, parsed without touching the network. Pure: text in, a target
// (or an error an operator can act on) out.
//
//   redis://[[user]:password@]host:port[/db]     one Redis (ioredis' own URL form); rediss:// for TLS
//   redis+sentinel://[[user]:password@]host[:port],host[:port]/<master name>[?db=N&sentinelPassword=P]
//                                                a primary found through Sentinels (port 26379)
//   redis+cluster://[[user]:password@]host[:port],host[:port]
//                                                a Redis Cluster from these seed nodes (port 6379)
// The user and password are those of the Redis servers; Sentinels that need their own password
// get it as `sentinelPassword`.

export interface RedisNode {
  host: string;
  port: number;
}

export interface RedisCredentials {
  username?: string;
  password?: string;
}

export type RedisTarget =
  | { kind: 'single'; url: string }
  | ({
      kind: 'sentinel';
      sentinels: RedisNode[];
      /** The master name the Sentinels monitor. */
      name: string;
      db: number;
      sentinelPassword?: string;
    } & RedisCredentials)
  | ({ kind: 'cluster'; nodes: RedisNode[] } & RedisCredentials);

export class RedisUrlError extends Error {
  override name = 'RedisUrlError';
}

const forms =
  'redis://HOST:PORT[/DB], rediss://HOST:PORT[/DB], redis+sentinel://HOST:PORT,HOST:PORT/MASTER[?db=N] or redis+cluster://HOST:PORT,HOST:PORT';

const defaultPort = { sentinel: 26379, cluster: 6379 } as const;
const multiHost = /^redis\+(sentinel|cluster):\/\/(?:([^@/]*)@)?([^/?#]*)(\/[^?#]*)?(\?[^#]*)?$/;

export function parseRedisUrl(text: string): RedisTarget {
  if (/^rediss?:\/\//.test(text)) return { kind: 'single', url: text };
  const shown = JSON.stringify(redact(text));
  if (/^rediss\+(sentinel|cluster):\/\//.test(text))
    throw new RedisUrlError(
      `--redis-url: TLS to Sentinels or a Cluster is not supported yet, got ${shown}`,
    );
  const m = multiHost.exec(text);
  if (!m)
    throw new RedisUrlError(
      `--redis-url must start with redis://, rediss://, redis+sentinel:// or redis+cluster:// (${forms}), got ${shown}`,
    );
  const kind = m[1] as 'sentinel' | 'cluster';
  const [, , auth, hosts = '', path = '', query = ''] = m;
  const nodes = hosts.split(',').map((h) => parseNode(h, defaultPort[kind], shown));
  const credentials = parseAuth(auth);
  const params = new URLSearchParams(query.slice(1));
  const known = kind === 'sentinel' ? ['db', 'sentinelPassword'] : [];
  for (const key of params.keys())
    if (!known.includes(key))
      throw new RedisUrlError(
        `--redis-url: redis+${kind}:// takes ${known.length ? known.map((k) => `?${k}=`).join(' and ') : 'no parameters'}, got ?${key}= in ${shown}`,
      );
  if (kind === 'cluster') {
    if (path !== '' && path !== '/')
      throw new RedisUrlError(
        `--redis-url: redis+cluster:// takes no database (a Cluster has only database 0), got ${shown}`,
      );
    return { kind, nodes, ...credentials };
  }
  const name = decodeURIComponent(path.replace(/^\//, ''));
  if (!name || name.includes('/'))
    throw new RedisUrlError(
      `--redis-url: redis+sentinel:// needs the master name the Sentinels monitor as its path, e.g. redis+sentinel://sentinel-0:26379,sentinel-1:26379/mymaster, got ${shown}`,
    );
  const rawDb = params.get('db') ?? '0';
  const db = Number(rawDb);
  if (!/^\d+$/.test(rawDb))
    throw new RedisUrlError(
      `--redis-url: ?db= must be a whole number ≥ 0, got ${JSON.stringify(rawDb)}`,
    );
  const sentinelPassword = params.get('sentinelPassword');
  return {
    kind,
    sentinels: nodes,
    name,
    db,
    ...credentials,
    ...(sentinelPassword ? { sentinelPassword } : {}),
  };
}

function parseNode(text: string, port: number, shown: string): RedisNode {
  const m = /^(\[[^\]]+\]|[^:[\]]+)(?::(\d{1,5}))?$/.exec(text);
  const n = m?.[2] === undefined ? port : Number(m[2]);
  if (!m || n < 1 || n > 65535)
    throw new RedisUrlError(
      `--redis-url: every address must be HOST or HOST:PORT, got ${JSON.stringify(text)} in ${shown}`,
    );
  return { host: m[1]!.replace(/^\[|\]$/g, ''), port: n };
}

function parseAuth(auth: string | undefined): RedisCredentials {
  if (!auth) return {};
  const colon = auth.indexOf(':');
  const username = decodeURIComponent(colon < 0 ? auth : auth.slice(0, colon));
  const password = colon < 0 ? '' : decodeURIComponent(auth.slice(colon + 1));
  return { ...(username ? { username } : {}), ...(password ? { password } : {}) };
}

/** The URL without its passwords, for messages and logs. */
export function redact(text: string): string {
  return text
    .replace(/\/\/([^@/:]*):[^@/]*@/, '//$1:***@')
    .replace(/([?&]sentinelPassword=)[^&#]*/, '$1***');
}
