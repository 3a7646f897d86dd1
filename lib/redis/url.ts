// The forms --redis-url takes, parsed without touching the network. Pure: text in, a target
// (or an error an operator can act on) out.
//
//   redis://[[user]:password@]host:port[/db]     one Redis (ioredis' own URL form)
//   redis+sentinel://[[user]:password@]host[:port],host[:port]/<master name>[?db=N&sentinelPassword=P]
//                                                a primary found through Sentinels (port 26379)
//   redis+cluster://[[user]:password@]host[:port],host[:port]
//                                                a Redis Cluster from these seed nodes (port 6379)
// The user and password are those of the Redis servers; Sentinels that need their own password
// get it as `sentinelPassword`. Each form as `rediss…` (rediss://, rediss+sentinel://,
// rediss+cluster://) speaks TLS to every server it connects to, the Sentinels included, and
// takes `?caFile=PATH`: the PEM of a CA to trust besides the system's, for Redis only.
// A password may also come from the environment (withPasswords), so that it stays out of argv.

export interface RedisNode {
  host: string;
  port: number;
}

export interface RedisCredentials {
  username?: string;
  password?: string;
}

/** TLS to every server (rediss…), with a CA to trust besides the system's. */
export interface RedisTls {
  tls?: true;
  /** A PEM file: the CA of the servers' certificates, for Redis only. */
  caFile?: string;
}

export type RedisTarget =
  | { kind: 'single'; url: string; caFile?: string }
  | ({
      kind: 'sentinel';
      sentinels: RedisNode[];
      /** The master name the Sentinels monitor. */
      name: string;
      db: number;
      sentinelPassword?: string;
    } & RedisCredentials &
      RedisTls)
  | ({ kind: 'cluster'; nodes: RedisNode[] } & RedisCredentials & RedisTls);

export class RedisUrlError extends Error {
  override name = 'RedisUrlError';
}

const forms =
  'redis://HOST:PORT[/DB], redis+sentinel://HOST:PORT,HOST:PORT/MASTER[?db=N] or redis+cluster://HOST:PORT,HOST:PORT, each as rediss… for TLS';

const defaultPort = { sentinel: 26379, cluster: 6379 } as const;
const multiHost =
  /^(rediss?)\+(sentinel|cluster):\/\/(?:([^@/]*)@)?([^/?#]*)(\/[^?#]*)?(\?[^#]*)?$/;

export function parseRedisUrl(text: string): RedisTarget {
  const shown = JSON.stringify(redact(text));
  if (/^rediss?:\/\//.test(text)) return parseSingle(text, shown);
  const m = multiHost.exec(text);
  if (!m)
    throw new RedisUrlError(
      `--redis-url must start with redis://, redis+sentinel:// or redis+cluster:// (${forms}), got ${shown}`,
    );
  const [, rawScheme, rawKind, auth, hosts = '', path = '', query = ''] = m;
  const scheme = rawScheme as 'redis' | 'rediss';
  const kind = rawKind as 'sentinel' | 'cluster';
  const nodes = hosts.split(',').map((h) => parseNode(h, defaultPort[kind], shown));
  const credentials = parseAuth(auth);
  const params = new URLSearchParams(query.slice(1));
  const known = kind === 'sentinel' ? ['db', 'sentinelPassword', 'caFile'] : ['caFile'];
  for (const key of params.keys())
    if (!known.includes(key))
      throw new RedisUrlError(
        `--redis-url: ${scheme}+${kind}:// takes ${known.map((k) => `?${k}=`).join(', ')}, got ?${key}= in ${shown}`,
      );
  const tls = tlsOf(scheme, params.get('caFile'), shown);
  if (kind === 'cluster') {
    if (path !== '' && path !== '/')
      throw new RedisUrlError(
        `--redis-url: ${scheme}+cluster:// takes no database (a Cluster has only database 0), got ${shown}`,
      );
    return { kind, nodes, ...credentials, ...tls };
  }
  const name = decodeURIComponent(path.replace(/^\//, ''));
  if (!name || name.includes('/'))
    throw new RedisUrlError(
      `--redis-url: ${scheme}+sentinel:// needs the master name the Sentinels monitor as its path, e.g. ${scheme}+sentinel://sentinel-0:26379,sentinel-1:26379/mymaster, got ${shown}`,
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
    ...tls,
  };
}

/** redis:// and rediss:// go to ioredis as they are, but for rollcall's own ?caFile=. */
function parseSingle(text: string, shown: string): RedisTarget {
  const at = text.search(/[?#]/);
  if (at < 0 || text[at] !== '?') return { kind: 'single', url: text };
  const hash = text.indexOf('#', at);
  const params = new URLSearchParams(text.slice(at + 1, hash < 0 ? undefined : hash));
  const caFile = params.get('caFile');
  if (caFile === null) return { kind: 'single', url: text };
  const scheme = text.startsWith('rediss:') ? 'rediss' : 'redis';
  tlsOf(scheme, caFile, shown);
  params.delete('caFile');
  const rest = params.size ? `?${params}` : '';
  return { kind: 'single', url: text.slice(0, at) + rest, caFile };
}

function tlsOf(scheme: 'redis' | 'rediss', caFile: string | null, shown: string): RedisTls {
  if (caFile !== null && (scheme !== 'rediss' || caFile === ''))
    throw new RedisUrlError(
      scheme === 'rediss'
        ? `--redis-url: ?caFile= needs the path of a PEM file, got ${shown}`
        : `--redis-url: ?caFile= is the CA of a Redis spoken to over TLS: start the URL with rediss instead of redis, got ${shown}`,
    );
  if (scheme === 'redis') return {};
  return { tls: true, ...(caFile ? { caFile } : {}) };
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

/** Passwords from the environment (REDIS_PASSWORD, REDIS_SENTINEL_PASSWORD), either optional. */
export interface RedisPasswords {
  password?: string | undefined;
  sentinelPassword?: string | undefined;
}

/**
 * `text` with the given passwords put in, percent-encoded (so any character is fine): the
 * password of the Redis servers after the user, the Sentinels' as ?sentinelPassword=. A
 * password given both ways is refused rather than one silently winning.
 */
export function withPasswords(
  text: string,
  { password, sentinelPassword }: RedisPasswords,
): string {
  let url = text;
  const shown = JSON.stringify(redact(text));
  if (password) {
    const m = /^([a-z+]+:\/\/)(?:([^@/?#]*)@)?(.*)$/s.exec(url);
    if (!m)
      throw new RedisUrlError(
        `REDIS_PASSWORD is set but --redis-url is not a URL (${forms}), got ${shown}`,
      );
    const [, scheme, auth = '', rest] = m;
    const colon = auth.indexOf(':');
    if (colon >= 0 && colon < auth.length - 1)
      throw new RedisUrlError(
        `the Redis password is given twice, in --redis-url and in REDIS_PASSWORD: keep one (REDIS_PASSWORD keeps it out of the URL), got ${shown}`,
      );
    const user = colon < 0 ? auth : auth.slice(0, colon);
    url = `${scheme}${user}:${encodeURIComponent(password)}@${rest}`;
  }
  if (sentinelPassword) {
    if (!/^rediss?\+sentinel:\/\//.test(url))
      throw new RedisUrlError(
        `REDIS_SENTINEL_PASSWORD is the password of Sentinels: --redis-url must then be a redis+sentinel:// URL, got ${shown}`,
      );
    if (/[?&]sentinelPassword=/.test(url))
      throw new RedisUrlError(
        `the Sentinels' password is given twice, as ?sentinelPassword= in --redis-url and in REDIS_SENTINEL_PASSWORD: keep one, got ${shown}`,
      );
    const hash = url.indexOf('#');
    const [head, tail] = hash < 0 ? [url, ''] : [url.slice(0, hash), url.slice(hash)];
    url = `${head}${head.includes('?') ? '&' : '?'}sentinelPassword=${encodeURIComponent(sentinelPassword)}${tail}`;
  }
  return url;
}

/** The URL without its passwords, for messages and logs. */
export function redact(text: string): string {
  return text
    .replace(/\/\/([^@/:]*):[^@/]*@/, '//$1:***@')
    .replace(/([?&]sentinelPassword=)[^&#]*/, '$1***');
}
