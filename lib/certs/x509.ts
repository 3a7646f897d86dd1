// The one place that loads @peculiar/x509: after the Reflect shim it needs, and bound to
// Node's own WebCrypto.
import './reflect-metadata.ts';
import * as x509 from '@peculiar/x509';

x509.cryptoProvider.set(globalThis.crypto);

export { x509 };
