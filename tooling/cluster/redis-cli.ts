// npm run redis -- up|down|status
// A private redis-server that outlives this command, tracked by a state file.

import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { defaultRedisDir, ping, startDetachedRedis } from './redis.ts';
import { processAlive } from './process.ts';

interface State {
  pid: number;
  port: number;
  url: string;
}

const stateFile = join(defaultRedisDir, 'redis.json');
const logFile = join(defaultRedisDir, 'redis.log');

function readState(): State | undefined {
  if (!existsSync(stateFile)) return undefined;
  try {
    return JSON.parse(readFileSync(stateFile, 'utf8')) as State;
  } catch {
    return undefined;
  }
}

async function running(): Promise<State | undefined> {
  const state = readState();
  return state && processAlive(state.pid) && (await ping(state.port)) ? state : undefined;
}

async function up(): Promise<void> {
  const current = await running();
  if (current) {
    console.log(current.url);
    return;
  }
  const started = await startDetachedRedis(defaultRedisDir, logFile);
  writeFileSync(stateFile, JSON.stringify(started) + '\n');
  console.log(started.url);
}

async function down(): Promise<void> {
  const state = readState();
  if (state && processAlive(state.pid)) {
    process.kill(state.pid, 'SIGTERM');
    const deadline = Date.now() + 5000;
    while (processAlive(state.pid) && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 50));
    if (processAlive(state.pid)) process.kill(state.pid, 'SIGKILL');
  }
  rmSync(stateFile, { force: true });
  console.log('redis stopped');
}

async function status(): Promise<void> {
  const current = await running();
  if (current) console.log(`running: ${current.url} (pid ${current.pid})`);
  else {
    console.log('not running');
    process.exitCode = 1;
  }
}

const commands: Record<string, () => Promise<void>> = { up, down, status };
const command = commands[process.argv[2] ?? ''];
if (!command) {
  console.error('usage: npm run redis -- up|down|status');
  process.exitCode = 2;
} else {
  await command();
}
