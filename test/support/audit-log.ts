// The local apiserver's audit log, as end-to-end tests read it (tooling/cluster/audit-log.ts
// says what it holds: ConfigMaps and Pods at level Metadata). Read incrementally: each call
// parses only the lines written since the last, and follows the file across a rotation (the
// rest of the rotated file first), so polling it every 200 ms stays cheap in a long run.
import { closeSync, openSync, readdirSync, readSync, statSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { testCluster } from './kube.ts';

/** An audit.k8s.io/v1 Event at level Metadata: the fields tests look at. */
export interface AuditEvent {
  auditID: string;
  stage: 'ResponseStarted' | 'ResponseComplete' | 'Panic';
  verb: string;
  requestURI: string;
  user?: { username?: string; groups?: string[] };
  objectRef?: {
    resource?: string;
    namespace?: string;
    name?: string;
    apiGroup?: string;
    apiVersion?: string;
    subresource?: string;
  };
  responseStatus?: { code?: number; reason?: string; message?: string };
  /** The audit annotations: an admission webhook's are `<webhook name>/<key>`. */
  annotations?: Record<string, string>;
  stageTimestamp?: string;
}

/** `<webhook name>/<key>`, as the apiserver logs a webhook's auditAnnotations key. */
export const webhookAnnotation = (webhook: string, key: string) => `${webhook}/${key}`;

/**
 * Reads one audit log file incrementally: each `events()` parses only the lines written since
 * the last call. When the file was rotated (a new inode under its name), it first reads the
 * rest of the one it was reading (a `<stem>-<time>.log` beside it now, found by its inode) and
 * any rotated after it. A backup pruned before it was read is lost (maxbackup is 2 at 50 MB).
 */
export class AuditLogReader {
  readonly file: string;
  private ino: number | undefined;
  private offset = 0;
  /** The bytes after the last newline read: a line still being written. */
  private partial = Buffer.alloc(0);
  private readonly seen: AuditEvent[] = [];

  constructor(file: string) {
    this.file = file;
  }

  /** Every event logged so far, oldest first. */
  events(): readonly AuditEvent[] {
    let inode: number;
    try {
      inode = statSync(this.file).ino;
    } catch {
      return this.seen; // nothing logged yet, or between a rotation's rename and create
    }
    if (this.ino === undefined) {
      // First sight: what was rotated away before, then the file.
      for (const backup of backupsOf(this.file)) {
        this.readFrom(backup);
        this.restart();
      }
    } else if (inode !== this.ino) {
      // Rotated (maybe more than once): the rest of the file read so far, then each newer backup.
      const backups = backupsOf(this.file);
      const from = backups.findIndex((f) => statSync(f).ino === this.ino);
      for (const [i, backup] of backups.entries()) {
        if (i < from) continue;
        if (i > from) this.restart();
        this.readFrom(backup);
      }
      this.restart();
    }
    this.ino = inode;
    this.readFrom(this.file);
    return this.seen;
  }

  /** The next file is read from its beginning. */
  private restart(): void {
    this.offset = 0;
    this.partial = Buffer.alloc(0);
  }

  /** Appends the complete lines of `file` after the offset. */
  private readFrom(file: string): void {
    const size = statSync(file).size;
    if (size <= this.offset) return;
    const chunk = Buffer.alloc(size - this.offset);
    const fd = openSync(file, 'r');
    try {
      readSync(fd, chunk, 0, chunk.length, this.offset);
    } finally {
      closeSync(fd);
    }
    this.offset = size;
    const bytes = Buffer.concat([this.partial, chunk]);
    const end = bytes.lastIndexOf(0x0a);
    this.partial = Buffer.from(bytes.subarray(end + 1));
    if (end < 0) return;
    for (const line of bytes.subarray(0, end).toString('utf8').split('\n'))
      if (line.trim() !== '') this.seen.push(JSON.parse(line) as AuditEvent);
  }
}

let reader: AuditLogReader | undefined;

/** The test cluster's audit log; a clear error for a cluster started without one. */
export function auditLogPath(): string {
  const { auditLog, dir } = testCluster();
  if (!auditLog)
    throw new Error(
      `the local cluster in ${dir} runs without an audit log (started before rollcall had one): ` +
        '`npm run cluster -- down` and `npm run cluster -- up`, or let `npm test` start its own',
    );
  return auditLog;
}

/** Every event the test cluster logged so far (those rotated while this process read too). */
export function auditEvents(): readonly AuditEvent[] {
  const file = auditLogPath();
  if (reader?.file !== file) reader = new AuditLogReader(file);
  return reader.events();
}

/** The events for which `match` holds, oldest first. */
export function auditEventsOf(match: (event: AuditEvent) => boolean): AuditEvent[] {
  return auditEvents().filter(match);
}

/**
 * Waits until an event for which `match` holds is logged, and returns the first. E.g. the
 * create that an Audit policy annotated:
 * `waitForAuditEvent((e) => webhookAnnotation('p.policies.rollcall.dev', 'validation_failure') in (e.annotations ?? {}))`.
 */
export async function waitForAuditEvent(
  match: (event: AuditEvent) => boolean,
  { timeoutMs = 15_000, everyMs = 200 } = {},
): Promise<AuditEvent> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const found = auditEvents().find(match);
    if (found) return found;
    if (Date.now() > deadline)
      throw new Error(`no matching event in the audit log ${auditLogPath()} after ${timeoutMs} ms`);
    await sleep(everyMs);
  }
}

/** The events whose annotations have `key` (e.g. `<policy>.policies.rollcall.dev/validation_failure`). */
export const annotatedWith = (key: string) => (event: AuditEvent) =>
  event.annotations !== undefined && key in event.annotations;

/** The rotated copies of `file` (`<stem>-<time>.log` beside it), oldest first. */
function backupsOf(file: string): string[] {
  const dir = dirname(file);
  const stem = basename(file, '.log');
  return readdirSync(dir)
    .filter((f) => f.startsWith(`${stem}-`) && f.endsWith('.log'))
    .sort()
    .map((f) => join(dir, f));
}
