import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parsePolicyServerConfig, PolicyServerConfigError } from '../../../policy-server/config.ts';

const env = { POLICY_SERVER: 'default', POD_NAME: 'policy-server-default-abc' };

describe('policy-server configuration', () => {
  test('has the documented defaults', () => {
    assert.deepEqual(parsePolicyServerConfig([], env), {
      port: 8443,
      address: '0.0.0.0',
      tlsDir: '/var/run/rollcall/tls',
      kubeconfig: undefined,
      server: 'default',
      pod: 'policy-server-default-abc',
      namespace: 'rollcall-system',
      logLevel: 'info',
      workers: 2,
      maxWorkers: 8,
      inlineMaxBytes: 32768,
    });
  });

  test('the inline size limit comes from a flag or the environment, 0 turning inline off', () => {
    const limit = (argv: string[], extra: Record<string, string> = {}) =>
      parsePolicyServerConfig(argv, { ...env, ...extra }).inlineMaxBytes;
    assert.equal(limit([], { ROLLCALL_INLINE_MAX_BYTES: '1024' }), 1024);
    assert.equal(limit(['--inline-max-bytes=0'], { ROLLCALL_INLINE_MAX_BYTES: '1024' }), 0);
    assert.throws(
      () => limit(['--inline-max-bytes=4000000']),
      /--inline-max-bytes \(ROLLCALL_INLINE_MAX_BYTES\) must be a whole number from 0 to 3145728/,
    );
  });

  test('reads the environment the Deployment sets', () => {
    const c = parsePolicyServerConfig([], {
      ...env,
      POD_NAMESPACE: 'ns',
      PORT: '9443',
      ROLLCALL_TLS_DIR: '/tls',
      KUBECONFIG: '/kc',
      LOG_LEVEL: 'debug',
    });
    assert.deepEqual(
      [c.namespace, c.port, c.tlsDir, c.kubeconfig, c.logLevel],
      ['ns', 9443, '/tls', '/kc', 'debug'],
    );
  });

  test('a flag wins over the environment, and a later flag over an earlier one', () => {
    const c = parsePolicyServerConfig(
      [
        '--port=8443',
        '--tls-dir=/var/run/rollcall/tls',
        '--address=127.0.0.1',
        '--port=31000',
        '--server=s2',
      ],
      { ...env, PORT: '1' },
    );
    assert.deepEqual([c.port, c.address, c.server], [31000, '127.0.0.1', 's2']);
  });

  test('refuses a missing server or pod, saying which flag or variable to set', () => {
    assert.throws(() => parsePolicyServerConfig([], { POD_NAME: 'p' }), {
      name: 'PolicyServerConfigError',
      message: /--server NAME or set POLICY_SERVER/,
    });
    assert.throws(() => parsePolicyServerConfig(['--server=s'], {}), /--pod NAME or set POD_NAME/);
  });

  test('refuses bad numbers and unknown flags', () => {
    assert.throws(
      () => parsePolicyServerConfig(['--port=http'], env),
      /--port \(PORT\) must be a whole number from 0 to 65535, got "http"/,
    );
    assert.throws(
      () => parsePolicyServerConfig(['--workers=4', '--max-workers=2'], env),
      /--max-workers \(2\) must be at least --workers \(4\)/,
    );
    assert.throws(() => parsePolicyServerConfig(['--bogus'], env), PolicyServerConfigError);
  });
});
