import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parsePolicyServerConfig, PolicyServerConfigError } from '../../../data-plane/config.ts';

const env = { POLICY_SERVER: 'default', POD_NAME: 'policy-server-default-abc' };

describe('policy-server configuration', () => {
  test('has the documented defaults', () => {
    assert.deepEqual(parsePolicyServerConfig([], env), {
      port: 8443,
      address: '0.0.0.0',
      tlsDir: '/var/run/rollcall/tls',
      clientCaFile: undefined,
      kubeconfig: undefined,
      server: 'default',
      pod: 'policy-server-default-abc',
      namespace: 'rollcall-system',
      logLevel: 'info',
      workers: 2,
      maxWorkers: 8,
      inlineMaxBytes: 32768,
      maxReviewBytes: 8 * 1024 * 1024,
      maxConnections: 1024,
      maxInFlight: 256,
      tlsHandshakeTimeoutSeconds: 10,
      sources: { allowInsecureHTTP: false, allowPrivateDestinations: false },
    });
  });

  test('the client CA file comes from a flag or the environment', () => {
    const file = (argv: string[], extra: Record<string, string> = {}) =>
      parsePolicyServerConfig(argv, { ...env, ...extra }).clientCaFile;
    assert.equal(file(['--client-ca-file=/etc/ca.crt']), '/etc/ca.crt');
    assert.equal(file([], { ROLLCALL_CLIENT_CA_FILE: '/var/ca.crt' }), '/var/ca.crt');
  });

  test('the spec.sources allowances are flags from the PolicyServer, off without them', () => {
    const sources = (argv: string[]) => parsePolicyServerConfig(argv, env).sources;
    assert.deepEqual(sources(['--sources-allow-insecure-http']), {
      allowInsecureHTTP: true,
      allowPrivateDestinations: false,
    });
    assert.deepEqual(sources(['--sources-allow-private-destinations']), {
      allowInsecureHTTP: false,
      allowPrivateDestinations: true,
    });
  });

  test('the inline size limit comes from a flag or the environment, 0 turning inline off', () => {
    const limit = (argv: string[], extra: Record<string, string> = {}) =>
      parsePolicyServerConfig(argv, { ...env, ...extra }).inlineMaxBytes;
    assert.equal(limit([], { ROLLCALL_INLINE_MAX_BYTES: '1024' }), 1024);
    assert.equal(limit(['--inline-max-bytes=0'], { ROLLCALL_INLINE_MAX_BYTES: '1024' }), 0);
    assert.throws(
      () => limit(['--inline-max-bytes=9000000']),
      /--inline-max-bytes \(ROLLCALL_INLINE_MAX_BYTES\) must be a whole number from 0 to 8388608/,
    );
    assert.throws(
      () => limit(['--inline-max-bytes=70000', '--max-review-bytes=65536']),
      /--inline-max-bytes \(ROLLCALL_INLINE_MAX_BYTES\) must be a whole number from 0 to 65536/,
    );
  });

  test('the limits on the way in come from flags or the environment', () => {
    const limits = (argv: string[], extra: Record<string, string> = {}) => {
      const c = parsePolicyServerConfig(argv, { ...env, ...extra });
      return [c.maxReviewBytes, c.maxConnections, c.maxInFlight, c.tlsHandshakeTimeoutSeconds];
    };
    assert.deepEqual(
      limits([], {
        ROLLCALL_MAX_REVIEW_BYTES: '1048576',
        ROLLCALL_MAX_CONNECTIONS: '100',
        ROLLCALL_MAX_IN_FLIGHT: '10',
        ROLLCALL_TLS_HANDSHAKE_TIMEOUT_SECONDS: '5',
      }),
      [1048576, 100, 10, 5],
    );
    assert.deepEqual(
      limits(
        [
          '--max-review-bytes=16777216',
          '--max-connections=2000',
          '--max-in-flight=512',
          '--tls-handshake-timeout-seconds=30',
        ],
        { ROLLCALL_MAX_CONNECTIONS: '100' },
      ),
      [16777216, 2000, 512, 30],
    );
  });

  test('refuses limits out of range, saying the range', () => {
    const parse = (flag: string) => () => parsePolicyServerConfig([flag], env);
    assert.throws(
      parse('--max-review-bytes=1000'),
      /--max-review-bytes \(ROLLCALL_MAX_REVIEW_BYTES\) must be a whole number from 65536 to 268435456, got "1000"/,
    );
    assert.throws(
      parse('--max-connections=0'),
      /--max-connections \(ROLLCALL_MAX_CONNECTIONS\) must be a whole number from 1 to/,
    );
    assert.throws(
      parse('--max-in-flight=-1'),
      /--max-in-flight \(ROLLCALL_MAX_IN_FLIGHT\) must be a whole number from 1 to/,
    );
    assert.throws(
      parse('--tls-handshake-timeout-seconds=0.5'),
      /--tls-handshake-timeout-seconds \(ROLLCALL_TLS_HANDSHAKE_TIMEOUT_SECONDS\) must be a whole number from 1 to 120/,
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
