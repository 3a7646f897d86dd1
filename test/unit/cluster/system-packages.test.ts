import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  ensureSystemPackages,
  MissingSystemPackageError,
} from '../../../tooling/cluster/system-packages.ts';

describe('ensureSystemPackages', () => {
  const quiet = () => {};

  test('returns the path of every command that is installed', () => {
    const paths = ensureSystemPackages(
      [{ command: 'sh', debianPackage: 'dash', neededBy: 'a shell' }],
      quiet,
      { root: false },
    );
    assert.match(paths.get('sh') ?? '', /\/sh$/);
  });

  test('without root, stops with one line naming what is missing and how to install it', () => {
    const err = (() => {
      try {
        ensureSystemPackages(
          [
            { command: 'sh', debianPackage: 'dash', neededBy: 'a shell' },
            { command: 'rollcall-no-such-tool', debianPackage: 'no-such-pkg', neededBy: 'a test' },
          ],
          quiet,
          { root: false },
        );
      } catch (e) {
        return e;
      }
      return undefined;
    })();
    assert.ok(err instanceof MissingSystemPackageError);
    assert.equal(
      err.message,
      'missing rollcall-no-such-tool (a test): install it first (Debian/Ubuntu: sudo apt-get install -y no-such-pkg)',
    );
    assert.ok(!err.message.includes('\n'), 'one line');
  });
});
