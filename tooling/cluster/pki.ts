// Certificates and credentials for the local cluster: a CA, a serving certificate for the
// apiserver on 127.0.0.1, a service-account signing key and a static admin token.
import { execFileSync } from 'node:child_process';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { credentialsTarget, type ApiTarget } from '../../lib/kube/api.ts';

export interface Pki {
  dir: string;
  caCert: string;
  caKey: string;
  servingCert: string;
  servingKey: string;
  serviceAccountKey: string;
  serviceAccountPub: string;
  tokenFile: string;
}

function openssl(args: string[], cwd: string): void {
  try {
    execFileSync('openssl', args, { cwd, stdio: ['ignore', 'ignore', 'pipe'] });
  } catch (err) {
    const e = err as NodeJS.ErrnoException & { stderr?: Buffer };
    if (e.code === 'ENOENT')
      throw new Error(
        'openssl is needed to make the local cluster certificates: apt-get install -y openssl',
      );
    throw new Error(`openssl ${args[0]} failed: ${e.stderr?.toString() ?? e.message}`);
  }
}

/**
 * Issues a certificate signed by the CA in dir. Used for the apiserver and for the simulated
 * policy servers' webhook endpoints.
 */
export function issueCertificate(
  dir: string,
  name: string,
  cn: string,
  sans: string[],
): { cert: string; key: string } {
  const cert = join(dir, `${name}.crt`);
  const key = join(dir, `${name}.key`);
  const ext = join(dir, `${name}.ext`);
  writeFileSync(
    ext,
    [
      'basicConstraints=CA:FALSE',
      'keyUsage=digitalSignature,keyEncipherment',
      'extendedKeyUsage=serverAuth,clientAuth',
      `subjectAltName=${sans.join(',')}`,
    ].join('\n'),
  );
  openssl(
    [
      'req',
      '-new',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-keyout',
      key,
      '-subj',
      `/CN=${cn}`,
      '-out',
      `${name}.csr`,
    ],
    dir,
  );
  openssl(
    [
      'x509',
      '-req',
      '-in',
      `${name}.csr`,
      '-CA',
      'ca.crt',
      '-CAkey',
      'ca.key',
      '-CAcreateserial',
      '-days',
      '3650',
      '-extfile',
      ext,
      '-out',
      cert,
    ],
    dir,
  );
  return { cert, key };
}

/** Creates the PKI once; later calls return the same files so a restarted cluster keeps its identity. */
export function ensurePki(dir: string): Pki {
  mkdirSync(dir, { recursive: true });
  const pki: Pki = {
    dir,
    caCert: join(dir, 'ca.crt'),
    caKey: join(dir, 'ca.key'),
    servingCert: join(dir, 'apiserver.crt'),
    servingKey: join(dir, 'apiserver.key'),
    serviceAccountKey: join(dir, 'sa.key'),
    serviceAccountPub: join(dir, 'sa.pub'),
    tokenFile: join(dir, 'tokens.csv'),
  };
  if (!existsSync(pki.caCert)) {
    openssl(
      [
        'req',
        '-x509',
        '-newkey',
        'rsa:2048',
        '-nodes',
        '-keyout',
        'ca.key',
        '-out',
        'ca.crt',
        '-days',
        '3650',
        '-subj',
        '/CN=rollcall-local-ca',
      ],
      dir,
    );
  }
  if (!existsSync(pki.servingCert)) {
    issueCertificate(dir, 'apiserver', 'kube-apiserver', [
      'IP:127.0.0.1',
      'DNS:localhost',
      'IP:10.0.0.1',
      'DNS:kubernetes.default.svc',
    ]);
  }
  if (!existsSync(pki.serviceAccountKey)) {
    const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    writeFileSync(pki.serviceAccountKey, privateKey.export({ type: 'pkcs8', format: 'pem' }), {
      mode: 0o600,
    });
    writeFileSync(pki.serviceAccountPub, publicKey.export({ type: 'spki', format: 'pem' }));
  }
  if (!existsSync(pki.tokenFile)) {
    // token,user,uid,"groups": the admin and the components are members of system:masters.
    const lines = ['admin', 'kube-controller-manager', 'kube-scheduler', 'kwok'].map(
      (user) => `${randomBytes(24).toString('hex')},${user},${user},"system:masters"`,
    );
    writeFileSync(pki.tokenFile, lines.join('\n') + '\n', { mode: 0o600 });
  }
  return pki;
}

/** The static token of one of the users in tokens.csv. */
export function tokenFor(pki: Pki, user: string): string {
  const line = readFileSync(pki.tokenFile, 'utf8')
    .split('\n')
    .find((l) => l.split(',')[1] === user);
  if (!line) throw new Error(`no token for ${user} in ${pki.tokenFile}`);
  return line.split(',')[0]!;
}

/** The cluster admin's access to the apiserver at `server`: the PKI's CA and the admin token. */
export function adminApiTarget(server: string, pki: Pki): ApiTarget {
  return credentialsTarget({ server, ca: readFileSync(pki.caCert), token: tokenFor(pki, 'admin') });
}
