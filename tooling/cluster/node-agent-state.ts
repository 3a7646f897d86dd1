// `<dir>/node-agent.json`: what the local node agent runs, for tests and the demo (to call a
// replica directly, or to kill its process). The agent rewrites it on every change.
import { createHash } from 'node:crypto';
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import { localDir } from './paths.ts';

const podEntrySchema = z.object({
  namespace: z.string(),
  /** The process's HTTPS port on 127.0.0.1. */
  port: z.number(),
  pid: z.number(),
  /** The readiness probe's verdict. */
  ready: z.boolean(),
  /** The pod IP the agent gave the pod (an identifier; nothing listens on it). */
  podIP: z.string(),
});

const stateSchema = z.object({
  /** The agent's pid. */
  pid: z.number(),
  /** The Unix socket of the HTTP CONNECT proxy the apiserver's `cluster` egress goes through. */
  proxySocket: z.string(),
  /** Pods with a live process, by pod name. */
  pods: z.record(z.string(), podEntrySchema),
});

export type NodeAgentPod = z.infer<typeof podEntrySchema>;
export type NodeAgentState = z.infer<typeof stateSchema>;

export const nodeAgentStateFile = (dir: string): string => join(dir, 'node-agent.json');

/**
 * Where the agent's CONNECT proxy listens: `<dir>/node-agent.sock`, or a name in the temp
 * directory when that path is too long for a Unix socket (108 bytes on Linux).
 */
export function nodeAgentSocketPath(dir: string): string {
  const inDir = join(dir, 'node-agent.sock');
  if (Buffer.byteLength(inDir) < 100) return inDir;
  const id = createHash('sha256').update(dir).digest('hex').slice(0, 16);
  return join(tmpdir(), `rollcall-node-agent-${id}.sock`);
}

/** The agent's current state, or undefined when it has not written one (not started). */
export function readNodeAgentState(dir = localDir): NodeAgentState | undefined {
  let text: string;
  try {
    text = readFileSync(nodeAgentStateFile(dir), 'utf8');
  } catch {
    return undefined;
  }
  return stateSchema.parse(JSON.parse(text));
}

/** Replaces the file atomically, so a reader never sees half of it. */
export function writeNodeAgentState(dir: string, state: NodeAgentState): void {
  const file = nodeAgentStateFile(dir);
  writeFileSync(`${file}.tmp`, JSON.stringify(state, null, 2));
  renameSync(`${file}.tmp`, file);
}
