// Redis for local runs, tests and benchmarks: the one in REDIS_URL when set, otherwise a
// private redis-server on a free loopback port. Nothing is persisted: Redis holds no state
// that rollcall cannot rebuild from the cluster (see DESIGN.md).

import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, openSync, closeSync } from 'node:fs';
import { createConnection } from 'node:net';
import { join } from 'node:path';
import { repoRoot } from './paths.ts';
import { freePort } from './ports.ts';
import { ensureSystemPackages } from './system-packages.ts';

export interface StartRedisOptions {
  /** Working directory of the private redis-server. Default: `.rollcall/local/redis`. */
  dir?: string;
  /** Receives progress lines (installing, starting). Default: silent. */
  log?: (line: string) => void;
}

export interface RunningRedis {
  /** `redis://127.0.0.1:PORT` (or REDIS_URL as given). */
  url: string;
  /** Process id of the private redis-server; 0 when REDIS_URL was used. */
  pid: number;
  /** Stops the private redis-server; a no-op when REDIS_URL was used. */
  stop(): Promise<void>;
}

export const defaultRedisDir = join(repoRoot, '.rollcall', 'local', 'redis');

/** Flags every private instance runs with; noeviction because BullMQ must never lose keys. */
export function redisServerArgs(port: number, dir: string): string[] {
  return [
    '--port',
    String(port),
    '--bind',
    '127.0.0.1',
    '--save',
    '',
    '--appendonly',
    'no',
    '--maxmemory-policy',
    'noeviction',
    '--dir',
    dir,
  ];
}

export async function startRedis(opts: StartRedisOptions = {}): Promise<RunningRedis> {
  const fromEnv = process.env.REDIS_URL;
  if (fromEnv) return { url: fromEnv, pid: 0, stop: async () => {} };
  const log = opts.log ?? (() => {});
  const dir = opts.dir ?? defaultRedisDir;
  const server = await ensureRedisServer(log);
  mkdirSync(dir, { recursive: true });
  // A port found free can be taken before redis binds it: try a few.
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    const child = spawn(server, redisServerArgs(port, dir), { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    try {
      await waitForPing(port, child);
    } catch (err) {
      child.kill('SIGKILL');
      if (attempt < 3 && /in use/i.test(output)) continue;
      throw new Error(
        `redis-server did not start: ${(err as Error).message}\n${output.slice(-2000)}`,
      );
    }
    const url = `redis://127.0.0.1:${port}`;
    log(`redis-server ${child.pid} listening on ${url}`);
    return { url, pid: child.pid ?? 0, stop: () => stopChild(child) };
  }
}

/**
 * Returns the path of redis-server, installing Debian's package first when it is missing
 * and we are root (CI, fresh dev machines). Without root it fails with how to install it
 * (or point REDIS_URL at a Redis 7 with maxmemory-policy noeviction).
 */
export async function ensureRedisServer(log: (line: string) => void = () => {}): Promise<string> {
  return ensureRedisCommand('redis-server', 'Redis for the queue and projections', log);
}

/** The same for redis-sentinel (Debian's package of that name), for the Sentinel tests. */
export async function ensureRedisSentinel(log: (line: string) => void = () => {}): Promise<string> {
  return ensureRedisCommand('redis-sentinel', 'the Sentinel tests', log);
}

function ensureRedisCommand(command: string, neededBy: string, log: (line: string) => void) {
  return ensureSystemPackages([{ command, debianPackage: command, neededBy }], log).get(command)!;
}

/** Resolves once `PING` answers `+PONG`; rejects when the child exits or after the timeout. */
export async function waitForPing(
  port: number,
  child?: ChildProcess,
  timeoutMs = 10_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child && child.exitCode !== null) throw new Error(`exited with code ${child.exitCode}`);
    if (await ping(port)) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`no PONG on port ${port} within ${timeoutMs} ms`);
}

export function ping(port: number): Promise<boolean> {
  return new Promise((resolvePromise) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    let reply = '';
    const done = (ok: boolean) => {
      socket.destroy();
      resolvePromise(ok);
    };
    socket.setTimeout(1000, () => done(false));
    socket.on('error', () => done(false));
    socket.on('connect', () => socket.write('PING\r\n'));
    socket.on('data', (chunk) => {
      reply += chunk.toString();
      if (reply.includes('\r\n')) done(reply.startsWith('+PONG'));
    });
  });
}

export function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolvePromise) => {
    const force = setTimeout(() => child.kill('SIGKILL'), 5000);
    child.once('exit', () => {
      clearTimeout(force);
      resolvePromise();
    });
    child.kill('SIGTERM');
  });
}

/** Starts a private redis-server detached from this process (for `npm run redis -- up`). */
export async function startDetachedRedis(
  dir: string,
  logFile: string,
): Promise<{ url: string; pid: number; port: number }> {
  const server = await ensureRedisServer((line) => console.error(line));
  mkdirSync(dir, { recursive: true });
  const port = await freePort();
  const out = openSync(logFile, 'a');
  const child = spawn(server, redisServerArgs(port, dir), {
    detached: true,
    stdio: ['ignore', out, out],
  });
  closeSync(out);
  child.unref();
  try {
    await waitForPing(port, child);
  } catch (err) {
    child.kill('SIGKILL');
    throw new Error(`redis-server did not start (see ${logFile}): ${(err as Error).message}`);
  }
  return { url: `redis://127.0.0.1:${port}`, pid: child.pid ?? 0, port };
}
