import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { describe, test } from 'node:test';
import { main } from '../../cli/rollcall.ts';
import { runStatus, type StatusIo } from '../../cli/status.ts';
import { fixturePath } from '../fixtures/yaml.ts';

interface Captured {
  code: number;
  stdout: string;
  stderr: string;
}

async function run(argv: string[], stdin = ''): Promise<Captured> {
  let stdout = '';
  let stderr = '';
  const io: StatusIo = {
    readFile: (path) => readFile(path, 'utf8'),
    readStdin: async () => stdin,
    stdout: (s) => void (stdout += s),
    stderr: (s) => void (stderr += s),
    now: () => new Date('2024-05-01T12:00:00Z'),
  };
  const code = await runStatus(argv, io);
  return { code, stdout, stderr };
}

const fixture = (name: string) => fixturePath(`status/${name}`);

describe('rollcall status', () => {
  test('exits 0 when every object in a multi-document file (with a List) is Current', async () => {
    const { code, stdout } = await run(['-f', fixture('current.yaml'), '-o', 'json']);
    assert.equal(code, 0);
    const names = (JSON.parse(stdout) as { kind: string; name: string; status: string }[]).map(
      (o) => `${o.kind}/${o.name}=${o.status}`,
    );
    assert.deepEqual(names, [
      'Service/web=Current',
      'Deployment/web=Current',
      'ConfigMap/settings=Current',
      'Policy/require-labels=Current',
    ]);
  });

  test('exits 1 and reports each object when some are not Current', async () => {
    const { code, stdout } = await run(['-f', fixture('mixed.yaml'), '-o', 'json']);
    assert.equal(code, 1);
    assert.deepEqual(JSON.parse(stdout), [
      {
        apiVersion: 'v1',
        kind: 'Service',
        namespace: 'app',
        name: 'web',
        status: 'Current',
        message: 'Service is ready',
        conditions: [],
      },
      {
        apiVersion: 'rollcall.dev/v1alpha1',
        kind: 'Policy',
        namespace: '',
        name: 'deny-latest',
        status: 'Failed',
        message: 'generation 2 failed to load on pod ps-b: module download failed: 404',
        conditions: [
          {
            type: 'Stalled',
            status: 'True',
            reason: 'LoadFailed',
            message: 'generation 2 failed to load on pod ps-b: module download failed: 404',
          },
        ],
      },
      {
        apiVersion: 'v1',
        kind: 'Pod',
        namespace: 'app',
        name: 'starting',
        status: 'InProgress',
        message: 'Pod is in the Pending phase',
        conditions: [
          {
            type: 'Reconciling',
            status: 'True',
            reason: 'PodPending',
            message: 'Pod is in the Pending phase',
          },
        ],
      },
    ]);
  });

  test('prints an aligned table by default', async () => {
    const { stdout } = await run(['-f', fixture('mixed.yaml')]);
    const lines = stdout.trimEnd().split('\n');
    assert.match(lines[0] ?? '', /^NAMESPACE\s+KIND\s+NAME\s+STATUS\s+MESSAGE$/);
    assert.match(lines[2] ?? '', /^\s+Policy\s+deny-latest\s+Failed\s+generation 2 failed/);
    assert.equal(lines.length, 4);
    const statusColumn = (lines[0] ?? '').indexOf('STATUS');
    assert.ok(
      lines.slice(1).every((line) => /^[A-Z]/.test(line.slice(statusColumn))),
      'columns line up',
    );
  });

  test('reads standard input with -f -', async () => {
    const { code, stdout } = await run(
      ['-f', '-', '-o', 'json'],
      '{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"}}',
    );
    assert.equal(code, 0);
    assert.equal(JSON.parse(stdout)[0].status, 'Current');
  });

  test('reads several files in order', async () => {
    const { code, stdout } = await run([
      '-f',
      fixture('current.yaml'),
      '-f',
      fixture('mixed.yaml'),
      '-o',
      'json',
    ]);
    assert.equal(code, 1);
    assert.equal(JSON.parse(stdout).length, 7);
  });

  const unreadable: { name: string; argv: string[]; stdin?: string; message: RegExp }[] = [
    {
      name: 'a YAML syntax error names the document',
      argv: ['-f', fixture('broken.yaml')],
      message: /document 3 of .*broken\.yaml: /,
    },
    {
      name: 'a document without kind names the document',
      argv: ['-f', '-'],
      stdin: 'apiVersion: v1\nmetadata: {name: x}\n',
      message: /document 1 of stdin: kind is missing/,
    },
    {
      name: 'a document without a name names the document',
      argv: ['-f', '-'],
      stdin: '---\napiVersion: v1\nkind: Pod\n',
      message: /document 1 of stdin: metadata.name is missing/,
    },
    {
      name: 'a scalar document is not an object',
      argv: ['-f', '-'],
      stdin: 'apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n---\nhello\n',
      message: /document 2 of stdin: not a Kubernetes object/,
    },
    {
      name: 'a bad List item names the item',
      argv: ['-f', '-'],
      stdin: 'apiVersion: v1\nkind: List\nitems: [42]\n',
      message: /document 1 of stdin, item 1: not a Kubernetes object/,
    },
    {
      name: 'a missing file names the file',
      argv: ['-f', '/nonexistent/file.yaml'],
      message: /\/nonexistent\/file\.yaml: ENOENT/,
    },
    { name: 'a missing -f is a usage error', argv: [], message: /-f <file\|-> is required/ },
    {
      name: 'an unknown output format is a usage error',
      argv: ['-f', '-', '-o', 'yaml'],
      message: /-o must be table or json/,
    },
    {
      name: 'an unknown flag is a usage error',
      argv: ['-f', '-', '--watch'],
      message: /Unknown option '--watch'/,
    },
  ];
  for (const row of unreadable) {
    test(`exits 2 when ${row.name}`, async () => {
      const { code, stdout, stderr } = await run(row.argv, row.stdin);
      assert.equal(code, 2);
      assert.equal(stdout, '', 'nothing half-printed');
      assert.match(stderr, row.message);
    });
  }

  test('an empty input is vacuously Current', async () => {
    const { code, stdout } = await run(['-f', '-', '-o', 'json'], '');
    assert.equal(code, 0);
    assert.deepEqual(JSON.parse(stdout), []);
  });
});

describe('the rollcall entry point', () => {
  const io = (out: string[]): StatusIo => ({
    readFile: async () => '',
    readStdin: async () => '',
    stdout: (s) => void out.push(s),
    stderr: (s) => void out.push(s),
    now: () => new Date(),
  });

  test('--help lists the commands and exits 0', async () => {
    const out: string[] = [];
    assert.equal(await main(['--help'], io(out)), 0);
    assert.match(out.join(''), /status\s+print the kstatus/);
  });

  test('an unknown command exits 2', async () => {
    const out: string[] = [];
    assert.equal(await main(['frobnicate'], io(out)), 2);
    assert.match(out.join(''), /unknown command "frobnicate"/);
  });

  test('a long-running command with a bad flag value exits 2 with a message saying what to fix', async () => {
    const out: string[] = [];
    assert.equal(await main(['worker', '--redis-url', 'localhost:6379'], io(out)), 2);
    assert.match(out.join(''), /--redis-url must start with redis:\/\//);
  });

  test('runs as a real process: stdin in, JSON out, exit code 1 for a non-Current object', () => {
    const script = fixturePath('../../cli/rollcall.ts');
    const result = spawnSync(process.execPath, [script, 'status', '-f', '-', '-o', 'json'], {
      input: 'apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n',
      encoding: 'utf8',
    });
    assert.equal(result.status, 1, result.stderr);
    assert.equal(JSON.parse(result.stdout)[0].status, 'InProgress');
  });

  test('runs as a real process on a multi-document file and exits 0', () => {
    const script = fixturePath('../../cli/rollcall.ts');
    const result = spawnSync(process.execPath, [script, 'status', '-f', fixture('current.yaml')], {
      encoding: 'utf8',
    });
    assert.equal(result.status, 0, result.stderr);
    assert.match(result.stdout, /Policy\s+require-labels\s+Current/);
  });
});
