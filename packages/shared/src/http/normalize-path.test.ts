import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { type NormalizedTarget, normalizePath, type PathErrorCode } from './normalize-path.js';
import { pathSegments } from './path-segments.js';

// ---------------------------------------------------------------------------------------------------
// Hand-written table
// ---------------------------------------------------------------------------------------------------

/** [raw target, expected path, expected query] */
const ACCEPTED: ReadonlyArray<readonly [string, string, string]> = [
  ['/', '/', ''],
  ['/a/b', '/a/b', ''],
  ['/file.v2.json', '/file.v2.json', ''],
  ['/a/b/', '/a/b/', ''],
  ['//a///b', '/a/b', ''],
  ['//', '/', ''],
  ['/a//', '/a/', ''],
  ['/./a/./b', '/a/b', ''],
  ['/a/.', '/a/', ''],
  ['/a/..', '/', ''],
  ['/a/b/../c', '/a/c', ''],
  ['/a/b/../../c/', '/c/', ''],
  ['/a/./../b', '/b', ''],
  ['/a//..', '/', ''],
  ['/.../..x/.y/x..', '/.../..x/.y/x..', ''],
  // percent-encoded dots, every case mix, take part in dot-segment resolution
  ['/a/%2e%2e/b', '/b', ''],
  ['/a/%2E%2E/b', '/b', ''],
  ['/a/%2e%2E/b', '/b', ''],
  ['/a/%2E%2e/b', '/b', ''],
  ['/a/.%2e/b', '/b', ''],
  ['/a/%2E./b', '/b', ''],
  ['/a/%2e/b', '/a/b', ''],
  ['/a/%2E', '/a/', ''],
  ['/a%2Eb', '/a.b', ''],
  // unreserved escapes are decoded, others keep uppercase hex
  ['/%7e/%7E', '/~/~', ''],
  ['/%41%62%30%2d%5f', '/Ab0-_', ''],
  ['/a%3fb', '/a%3Fb', ''],
  ['/a%3Fb?c', '/a%3Fb', 'c'],
  ['/a%20b/%25', '/a%20b/%25', ''],
  ['/a;b=c/%3b', '/a;b=c/%3B', ''],
  // double encoding is decoded once only: `%25` then the literal text `2e`
  ['/%252e', '/%252e', ''],
  ['/a/%252e%252E/b', '/a/%252e%252E/b', ''],
  ['/%252E%252E/..', '/', ''],
  // Unicode: raw is UTF-8 encoded, encoded stays encoded with uppercase hex
  ['/caf\u00e9', '/caf%C3%A9', ''],
  ['/caf%c3%a9', '/caf%C3%A9', ''],
  ['/\u4e2d/%e4%b8%ad', '/%E4%B8%AD/%E4%B8%AD', ''],
  ['/\u{1F600}', '/%F0%9F%98%80', ''],
  // the query is everything after the first `?`, verbatim
  ['/a/../b?x=/../y', '/b', 'x=/../y'],
  ['/a?', '/a', ''],
  ['/?q', '/', 'q'],
  ['/a/?q=%2f%5C..', '/a/', 'q=%2f%5C..'],
  ['/a?b?c', '/a', 'b?c'],
  ['/a/..?x', '/', 'x'],
  ['/a/%2e?x', '/a/', 'x'],
];

const REJECTED: ReadonlyArray<readonly [string, PathErrorCode]> = [
  ['', 'PATH_NOT_ORIGIN_FORM'],
  ['*', 'PATH_NOT_ORIGIN_FORM'],
  ['http://example.com/a', 'PATH_NOT_ORIGIN_FORM'],
  ['example.com:443', 'PATH_NOT_ORIGIN_FORM'],
  ['a/b', 'PATH_NOT_ORIGIN_FORM'],
  ['/a#frag', 'PATH_NOT_ORIGIN_FORM'],
  ['/a?x#y', 'PATH_NOT_ORIGIN_FORM'],
  ['/..', 'PATH_ESCAPES_ROOT'],
  ['/../a', 'PATH_ESCAPES_ROOT'],
  ['//..', 'PATH_ESCAPES_ROOT'],
  ['/a/../../b', 'PATH_ESCAPES_ROOT'],
  ['/%2e%2e/', 'PATH_ESCAPES_ROOT'],
  ['/%2E%2e/', 'PATH_ESCAPES_ROOT'],
  ['/a/%2e%2e/%2E%2E/b', 'PATH_ESCAPES_ROOT'],
  ['/./..?x', 'PATH_ESCAPES_ROOT'],
  ['/a%2Fb', 'PATH_ENCODED_SLASH'],
  ['/a%2fb', 'PATH_ENCODED_SLASH'],
  ['/%2e%2e%2fetc', 'PATH_ENCODED_SLASH'],
  ['/a\\b', 'PATH_BACKSLASH'],
  ['/..\\..', 'PATH_BACKSLASH'],
  ['/a%5cb', 'PATH_BACKSLASH'],
  ['/a%5Cb', 'PATH_BACKSLASH'],
  ['/a\u0000b', 'PATH_CONTROL_CHAR'],
  ['/a%00b', 'PATH_CONTROL_CHAR'],
  ['/a%0d%0aSet-Cookie:x', 'PATH_CONTROL_CHAR'],
  ['/a%1F', 'PATH_CONTROL_CHAR'],
  ['/a%7f', 'PATH_CONTROL_CHAR'],
  ['/a\tb', 'PATH_CONTROL_CHAR'],
  ['/a b', 'PATH_CONTROL_CHAR'],
  ['/a\r\n', 'PATH_CONTROL_CHAR'],
  ['/a\u007f', 'PATH_CONTROL_CHAR'],
  ['/a?x y', 'PATH_CONTROL_CHAR'],
  ['/a?x\u0000', 'PATH_CONTROL_CHAR'],
  ['/%', 'PATH_INVALID_ENCODING'],
  ['/%4', 'PATH_INVALID_ENCODING'],
  ['/%zz', 'PATH_INVALID_ENCODING'],
  ['/%4g', 'PATH_INVALID_ENCODING'],
  ['/a%?x', 'PATH_INVALID_ENCODING'],
  ['/%%41', 'PATH_INVALID_ENCODING'],
  ['/%\u00e9e', 'PATH_INVALID_ENCODING'],
  ['/a\ud800', 'PATH_INVALID_ENCODING'],
  ['/a\udc00b', 'PATH_INVALID_ENCODING'],
  [`/${'a'.repeat(8192)}`, 'PATH_TOO_LONG'],
  [`/${'%2e'.repeat(3000)}`, 'PATH_TOO_LONG'],
];

describe('normalizePath table', () => {
  test.each(ACCEPTED)('%j -> %j ? %j', (target, path, query) => {
    expect(normalizePath(target)).toEqual({ ok: true, path, query });
  });

  test.each(REJECTED)('%j -> %s', (target, code) => {
    const result = normalizePath(target);
    expect(result).toMatchObject({ ok: false, code });
  });

  test('a target of exactly maxLength is accepted, one more is not', () => {
    expect(normalizePath(`/${'a'.repeat(8191)}`)).toMatchObject({ ok: true });
    expect(normalizePath('/abc', 4)).toEqual({ ok: true, path: '/abc', query: '' });
    expect(normalizePath('/abcd', 4)).toMatchObject({ ok: false, code: 'PATH_TOO_LONG' });
    expect(normalizePath('/abcd', 4)).toHaveProperty('message', 'request-target is longer than 4 characters');
  });

  test('error messages name the problem', () => {
    const messageOf = (target: string) => (normalizePath(target) as { message: string }).message;
    expect(messageOf('/a%2Fb')).toBe('path contains an encoded slash (%2F)');
    expect(messageOf('/a\\b')).toContain('backslash');
    expect(messageOf('/a%00')).toContain('control character');
    expect(messageOf('/..')).toContain('above the root');
    expect(messageOf('/%zz')).toContain('percent-encoding');
    expect(messageOf('*')).toContain('origin-form');
    expect(messageOf('/a#b')).toContain('fragment');
  });
});

describe('pathSegments', () => {
  test.each([
    ['/', []],
    ['/a', ['a']],
    ['/a/', ['a']],
    ['/a/b', ['a', 'b']],
    ['/a/b/', ['a', 'b']],
    ['/orders/42/items', ['orders', '42', 'items']],
    ['/%C3%A9/x.json', ['%C3%A9', 'x.json']],
  ] as const)('%j -> %j', (path, segments) => {
    expect(pathSegments(path)).toEqual(segments);
  });

  test('a trailing slash gives the same segments as none', () => {
    expect(pathSegments('/orders/')).toEqual(pathSegments('/orders'));
  });
});

// ---------------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------------

const CODES: ReadonlySet<string> = new Set<PathErrorCode>([
  'PATH_NOT_ORIGIN_FORM',
  'PATH_TOO_LONG',
  'PATH_INVALID_ENCODING',
  'PATH_ENCODED_SLASH',
  'PATH_BACKSLASH',
  'PATH_CONTROL_CHAR',
  'PATH_ESCAPES_ROOT',
]);

const UNRESERVED = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~';
const isUnreservedChar = (ch: string | undefined) =>
  ch !== undefined && ch.length === 1 && UNRESERVED.includes(ch);

/** Characters weighted toward what breaks normalisers. */
const unitArb = fc.oneof(
  { weight: 8, arbitrary: fc.constant('/') },
  { weight: 6, arbitrary: fc.constant('.') },
  { weight: 4, arbitrary: fc.constant('%') },
  {
    weight: 8,
    arbitrary: fc.constantFrom('2', 'e', 'E', 'f', 'F', '5', 'c', 'C', '0', '7', '1', '3', 'a', 'g'),
  },
  {
    weight: 4,
    arbitrary: fc.constantFrom('%2e', '%2E', '%2f', '%5c', '%41', '%7e', '%25', '%3f', '%c3%a9', '%00'),
  },
  { weight: 1, arbitrary: fc.constant('\\') },
  { weight: 4, arbitrary: fc.constantFrom('b', 'x', 'Z', '-', '_', '~', ';', '=', '@', ':', '+') },
  { weight: 1, arbitrary: fc.constantFrom('?', '#', ' ') },
  {
    weight: 1,
    arbitrary: fc.constantFrom('\u00e9', '\u4e2d', '\u{1F600}', '\u0085', '\u2028', '\ud800', '\udc00'),
  },
  {
    weight: 1,
    arbitrary: fc
      .oneof(fc.integer({ min: 0, max: 0x1f }), fc.constant(0x7f))
      .map((c) => String.fromCharCode(c)),
  },
);
const joined = (units: string[]) => units.join('');
/** Mostly origin-form targets, sometimes anything. */
const targetArb = fc.oneof(
  { weight: 9, arbitrary: fc.array(unitArb, { maxLength: 40 }).map((units) => `/${joined(units)}`) },
  { weight: 1, arbitrary: fc.array(unitArb, { maxLength: 40 }).map(joined) },
);

/** Strings of unreserved characters other than `.` and `..`: segments that need no normalisation. */
const safeSegmentArb = fc
  .string({ unit: fc.constantFrom(...UNRESERVED), minLength: 1, maxLength: 8 })
  .filter((s) => s !== '.' && s !== '..');
const safePath = (segments: readonly string[], trailingSlash: boolean) =>
  segments.length === 0 ? '/' : `/${segments.join('/')}${trailingSlash ? '/' : ''}`;

const NUM_RUNS = 5000;

function expectNormalPath(path: string): void {
  expect(path.startsWith('/')).toBe(true);
  for (const bad of ['//', '/./', '/../']) expect(path).not.toContain(bad);
  expect(path.endsWith('/.') || path.endsWith('/..')).toBe(false);
  expect(path).not.toMatch(/%2F|%5C|%00|\\/i);
  // only printable ASCII other than `?`, `#` and `\`; escapes are valid, uppercase, and not of unreserved bytes
  expect(path).toMatch(/^(?:[\x21-\x22\x24\x26-\x3e\x40-\x5b\x5d-\x7e]|%[0-9A-F]{2})*$/);
  for (const match of path.matchAll(/%([0-9A-F]{2})/g)) {
    const byte = Number.parseInt(match[1]!, 16);
    expect(isUnreservedChar(String.fromCharCode(byte))).toBe(false);
    expect(byte < 0x20 || byte === 0x7f).toBe(false);
  }
  for (const segment of pathSegments(path)) expect(['', '.', '..']).not.toContain(segment);
}

/**
 * A deliberately different implementation (split, regex, array stack) used as an oracle. It returns
 * every problem it finds; the real normaliser reports the first one it meets, which must be among them.
 */
function referenceNormalize(
  target: string,
): { ok: true; path: string; query: string } | { ok: false; codes: Set<string> } {
  if (!target.startsWith('/')) return { ok: false, codes: new Set(['PATH_NOT_ORIGIN_FORM']) };
  if (target.length > 8192) return { ok: false, codes: new Set(['PATH_TOO_LONG']) };
  const codes = new Set<string>();
  const q = target.indexOf('?');
  const rawPath = q < 0 ? target : target.slice(0, q);
  const query = q < 0 ? '' : target.slice(q + 1);
  if (target.includes('#')) codes.add('PATH_NOT_ORIGIN_FORM');
  if (/[\x00-\x20\x7f]/.test(target)) codes.add('PATH_CONTROL_CHAR');
  if (rawPath.includes('\\')) codes.add('PATH_BACKSLASH');
  if (/%(?![0-9A-Fa-f]{2})/.test(rawPath)) codes.add('PATH_INVALID_ENCODING');
  try {
    encodeURIComponent(rawPath);
  } catch {
    codes.add('PATH_INVALID_ENCODING'); // lone surrogate
  }
  for (const [, hex] of rawPath.matchAll(/%([0-9A-Fa-f]{2})/g)) {
    const byte = Number.parseInt(hex!, 16);
    if (byte === 0x2f) codes.add('PATH_ENCODED_SLASH');
    if (byte === 0x5c) codes.add('PATH_BACKSLASH');
    if (byte < 0x20 || byte === 0x7f) codes.add('PATH_CONTROL_CHAR');
  }
  const raw = rawPath.split('/').slice(1);
  const decoded = raw.map((segment) =>
    segment
      .replace(/%[0-9A-Fa-f]{2}/g, (triplet) => {
        const ch = String.fromCharCode(Number.parseInt(triplet.slice(1), 16));
        return isUnreservedChar(ch) ? ch : triplet.toUpperCase();
      })
      .replace(/[^\x00-\x7f]+/g, (run) => {
        try {
          return encodeURIComponent(run);
        } catch {
          return run;
        }
      }),
  );
  const stack: string[] = [];
  for (const segment of decoded) {
    if (segment === '' || segment === '.') continue;
    if (segment !== '..') stack.push(segment);
    else if (stack.pop() === undefined) {
      codes.add('PATH_ESCAPES_ROOT');
      break;
    }
  }
  if (codes.size > 0) return { ok: false, codes };
  const last = decoded[decoded.length - 1];
  const trailing = last === '' || last === '.' || last === '..';
  return { ok: true, path: safePath(stack, trailing), query };
}

describe('normalizePath properties', () => {
  test('any input is rejected with a known code or gives a normal, idempotent path', () => {
    fc.assert(
      fc.property(targetArb, (target) => {
        const result = normalizePath(target);
        if (!result.ok) {
          expect(CODES.has(result.code)).toBe(true);
          expect(result.message.length).toBeGreaterThan(0);
          return;
        }
        expectNormalPath(result.path);
        expect(normalizePath(result.path)).toEqual({ ok: true, path: result.path, query: '' });
        const q = target.indexOf('?');
        expect(result.query).toBe(q < 0 ? '' : target.slice(q + 1));
      }),
      { numRuns: NUM_RUNS },
    );
  });

  test('agrees with an independent reference implementation', () => {
    fc.assert(
      fc.property(targetArb, (target) => {
        const actual: NormalizedTarget = normalizePath(target);
        const expected = referenceNormalize(target);
        if (expected.ok) {
          expect(actual).toEqual(expected);
        } else {
          expect(actual.ok).toBe(false);
          if (!actual.ok) expect([...expected.codes]).toContain(actual.code);
        }
      }),
      { numRuns: NUM_RUNS },
    );
  });

  test('a path of unreserved segments comes back unchanged', () => {
    fc.assert(
      fc.property(fc.array(safeSegmentArb, { maxLength: 10 }), fc.boolean(), (segments, trailing) => {
        const path = safePath(segments, trailing);
        expect(normalizePath(path)).toEqual({ ok: true, path, query: '' });
      }),
      { numRuns: NUM_RUNS },
    );
  });

  test('inserting `.`, empty or `x/..` segments anywhere never changes the result', () => {
    const noiseArb = fc.array(
      fc.oneof(
        fc.constant(['.']),
        fc.constant(['']),
        fc.constant(['%2e']),
        safeSegmentArb.map((x) => [x, '..']),
        safeSegmentArb.map((x) => [x, '%2E%2e']),
      ),
      { minLength: 1, maxLength: 4 },
    );
    fc.assert(
      fc.property(
        fc.array(safeSegmentArb, { maxLength: 8 }),
        fc.nat(),
        noiseArb,
        (segments, position, noise) => {
          const at = position % (segments.length + 1);
          const noisy = [...segments.slice(0, at), ...noise.flat(), ...segments.slice(at)];
          // noise at the very end leaves a trailing slash, as `/a/.` -> `/a/`
          const expected = safePath(segments, at === segments.length);
          expect(normalizePath(`/${noisy.join('/')}`)).toEqual({ ok: true, path: expected, query: '' });
        },
      ),
      { numRuns: NUM_RUNS },
    );
  });

  test('percent-encoding an unreserved character of the path, in any case, changes nothing', () => {
    fc.assert(
      fc.property(targetArb, fc.nat(), fc.boolean(), (target, position, lowerCase) => {
        const q = target.indexOf('?');
        const pathLength = q < 0 ? target.length : q;
        if (pathLength < 2) return;
        const at = 1 + (position % (pathLength - 1));
        const ch = target[at];
        // skip the hex digits of an escape: `%2e` must not become `%%32e`
        if (!isUnreservedChar(ch) || target[at - 1] === '%' || target[at - 2] === '%') return;
        const hex = ch!.charCodeAt(0).toString(16).padStart(2, '0');
        const encoded = `${target.slice(0, at)}%${lowerCase ? hex : hex.toUpperCase()}${target.slice(at + 1)}`;
        expect(normalizePath(encoded)).toEqual(normalizePath(target));
      }),
      { numRuns: NUM_RUNS },
    );
  });

  test('raw non-ASCII and its UTF-8 escapes (any hex case) normalise alike', () => {
    const charArb = fc.oneof(
      fc.constantFrom('a', 'Z', '0', '-', '/'),
      fc
        .integer({ min: 0x80, max: 0x10ffff })
        .filter((cp) => cp < 0xd800 || cp > 0xdfff)
        .map((cp) => String.fromCodePoint(cp)),
    );
    fc.assert(
      fc.property(fc.array(charArb, { minLength: 1, maxLength: 12 }), fc.boolean(), (chars, lowerCase) => {
        const raw = `/${chars.join('')}`;
        const escaped = raw.replace(/[^\x00-\x7f]/gu, (ch) => {
          const e = encodeURIComponent(ch);
          return lowerCase ? e.toLowerCase() : e;
        });
        const result = normalizePath(raw);
        expect(result.ok).toBe(true);
        expect(normalizePath(escaped)).toEqual(result);
      }),
      { numRuns: NUM_RUNS },
    );
  });
});
