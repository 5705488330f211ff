import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import {
  canonicalRulePath,
  type NormalizedTarget,
  normalizePath,
  type PathErrorCode,
} from './normalize-path.js';
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
  ['/.x/.y/x..y/z/..', '/.x/.y/x..y/', ''],
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
  ['/a=b,c/%3d', '/a=b,c/%3D', ''],
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

// ---------------------------------------------------------------------------------------------------
// Spellings that only some upstreams accept: one block per row of the table in docs/paths.md
// ---------------------------------------------------------------------------------------------------

type Outcome = { path: string } | { code: PathErrorCode };
/** [row of docs/paths.md, raw target, what the gateway does with it] */
const SPELLINGS: ReadonlyArray<readonly [string, string, Outcome]> = [
  // `;` path parameters: Tomcat and Spring read `/admin;x=1` as `/admin`
  ['path parameters', '/admin;x=1', { code: 'PATH_PARAMETERS' }],
  ['path parameters', '/admin;/x', { code: 'PATH_PARAMETERS' }],
  ['path parameters', '/admin;jsessionid=1/x', { code: 'PATH_PARAMETERS' }],
  ['path parameters', '/admin%3bx=1/x', { code: 'PATH_PARAMETERS' }],
  ['path parameters', '/admin%3B', { code: 'PATH_PARAMETERS' }],
  ['path parameters', '/admin/x?a;b=c', { path: '/admin/x' }],
  // `%25` + two hex digits: an upstream that decodes twice reads `%252e` as `.`
  ['double encoding', '/foo/%252e%252e/admin/x', { code: 'PATH_DOUBLE_ENCODED' }],
  ['double encoding', '/%252F', { code: 'PATH_DOUBLE_ENCODED' }],
  ['double encoding', '/a%25c3%25bc', { code: 'PATH_DOUBLE_ENCODED' }],
  ['double encoding', '/%25%32%65', { code: 'PATH_DOUBLE_ENCODED' }],
  ['double encoding', '/%25%32e/x', { code: 'PATH_DOUBLE_ENCODED' }],
  ['double encoding', '/100%25', { path: '/100%25' }],
  ['double encoding', '/100%25/x', { path: '/100%25/x' }],
  ['double encoding', '/%25zz%25g1', { path: '/%25zz%25g1' }],
  ['double encoding', '/a%25%41', { path: '/a%25A' }],
  // Unicode that NFKC or Windows best-fit turns into `.`, `/` or `\`
  [
    'dot-like and slash-like Unicode',
    '/foo/%EF%BC%8E%EF%BC%8E/admin/x',
    { code: 'PATH_CONFUSABLE_CHARACTER' },
  ],
  [
    'dot-like and slash-like Unicode',
    '/foo/%ef%bc%8e%ef%bc%8e/admin/x',
    { code: 'PATH_CONFUSABLE_CHARACTER' },
  ],
  ['dot-like and slash-like Unicode', '/foo/\uff0e\uff0e/admin/x', { code: 'PATH_CONFUSABLE_CHARACTER' }],
  ['dot-like and slash-like Unicode', '/foo/%E2%80%A5/admin', { code: 'PATH_CONFUSABLE_CHARACTER' }],
  ['dot-like and slash-like Unicode', '/admin%EF%BC%8Fx', { code: 'PATH_CONFUSABLE_CHARACTER' }],
  ['dot-like and slash-like Unicode', '/admin\u2215x', { code: 'PATH_CONFUSABLE_CHARACTER' }],
  ['dot-like and slash-like Unicode', '/admin%E2%81%84x', { code: 'PATH_CONFUSABLE_CHARACTER' }],
  ['dot-like and slash-like Unicode', '/admin%E2%A7%B8x', { code: 'PATH_CONFUSABLE_CHARACTER' }],
  ['dot-like and slash-like Unicode', '/admin%EF%BC%BCx', { code: 'PATH_CONFUSABLE_CHARACTER' }],
  ['dot-like and slash-like Unicode', '/admin\ufe68x', { code: 'PATH_CONFUSABLE_CHARACTER' }],
  ['dot-like and slash-like Unicode', '/caf%C3%A9/%E3%80%82', { path: '/caf%C3%A9/%E3%80%82' }],
  // a segment ending in `.` or space: Windows and IIS drop them, `/admin./x` is `/admin/x` there
  ['dot-dot name', '/..x/y', { code: 'PATH_DOT_DOT_NAME' }],
  ['dot-dot name', '/a/%2E%2Ex', { code: 'PATH_DOT_DOT_NAME' }],
  ['dot-dot name', '/a/...x', { code: 'PATH_DOT_DOT_NAME' }],
  ['trailing dot or space', '/admin./x', { code: 'PATH_TRAILING_DOT_OR_SPACE' }],
  ['trailing dot or space', '/admin%20/x', { code: 'PATH_TRAILING_DOT_OR_SPACE' }],
  ['trailing dot or space', '/admin%2e/x', { code: 'PATH_TRAILING_DOT_OR_SPACE' }],
  ['trailing dot or space', '/admin.%20./x', { code: 'PATH_TRAILING_DOT_OR_SPACE' }],
  ['trailing dot or space', '/admin/x.', { code: 'PATH_TRAILING_DOT_OR_SPACE' }],
  ['trailing dot or space', '/admin/x.?q', { code: 'PATH_TRAILING_DOT_OR_SPACE' }],
  ['trailing dot or space', '/admin/...', { code: 'PATH_TRAILING_DOT_OR_SPACE' }],
  ['trailing dot or space', '/x./../admin', { code: 'PATH_TRAILING_DOT_OR_SPACE' }],
  ['trailing dot or space', '/admin%09/x', { code: 'PATH_CONTROL_CHAR' }],
  ['trailing dot or space', '/admin /x', { code: 'PATH_CONTROL_CHAR' }],
  ['trailing dot or space', '/a%20b/.x/x.y', { path: '/a%20b/.x/x.y' }],
  ['trailing dot or space', '/admin/./x/..', { path: '/admin/' }],
  // percent-escapes that are not UTF-8: `%C0%AE` is an overlong `.`
  ['invalid UTF-8', '/foo/%C0%AE%C0%AE/admin/x', { code: 'PATH_INVALID_UTF8' }],
  ['invalid UTF-8', '/%c0%af', { code: 'PATH_INVALID_UTF8' }],
  ['invalid UTF-8', '/%E0%80%AE', { code: 'PATH_INVALID_UTF8' }],
  ['invalid UTF-8', '/%F0%80%80%AE', { code: 'PATH_INVALID_UTF8' }],
  ['invalid UTF-8', '/a%80b', { code: 'PATH_INVALID_UTF8' }],
  ['invalid UTF-8', '/a%BF', { code: 'PATH_INVALID_UTF8' }],
  ['invalid UTF-8', '/%ED%A0%80', { code: 'PATH_INVALID_UTF8' }],
  ['invalid UTF-8', '/%ED%BF%BF', { code: 'PATH_INVALID_UTF8' }],
  ['invalid UTF-8', '/%F4%90%80%80', { code: 'PATH_INVALID_UTF8' }],
  ['invalid UTF-8', '/%F5%80%80%80', { code: 'PATH_INVALID_UTF8' }],
  ['invalid UTF-8', '/%FF', { code: 'PATH_INVALID_UTF8' }],
  ['invalid UTF-8', '/%E4%B8', { code: 'PATH_INVALID_UTF8' }],
  ['invalid UTF-8', '/%E4%B8/x', { code: 'PATH_INVALID_UTF8' }],
  ['invalid UTF-8', '/%C3a', { code: 'PATH_INVALID_UTF8' }],
  ['invalid UTF-8', '/%C3\u00a9', { code: 'PATH_INVALID_UTF8' }],
  ['invalid UTF-8', '/%C3%C3%A9', { code: 'PATH_INVALID_UTF8' }],
  ['invalid UTF-8', '/%ED%9F%BF%EE%80%80%F4%8F%BF%BF', { path: '/%ED%9F%BF%EE%80%80%F4%8F%BF%BF' }],
  // every spelling of one non-ASCII resource gives the rule path's canonical form
  ['non-ASCII', '/%c3%bc', { path: '/%C3%BC' }],
  ['non-ASCII', '/%C3%BC', { path: '/%C3%BC' }],
  ['non-ASCII', '/\u00fc', { path: '/%C3%BC' }],
  ['non-ASCII', '/%c3%BC/%F0%9F%98%80', { path: '/%C3%BC/%F0%9F%98%80' }],
  // case is kept: a rule matches it case-insensitively only with `match.caseInsensitive`
  ['letter case', '/ADMIN/x', { path: '/ADMIN/x' }],
  ['letter case', '/Admin/%7eX', { path: '/Admin/~X' }],
];

describe('spellings that only some upstreams accept (docs/paths.md)', () => {
  test.each(SPELLINGS)('%s: %j -> %j', (_row, target, outcome) => {
    const result = normalizePath(target);
    if ('code' in outcome) expect(result).toMatchObject({ ok: false, code: outcome.code });
    else expect(result).toEqual({ ok: true, path: outcome.path, query: target.split('?')[1] ?? '' });
  });

  test('each refusal names its reason', () => {
    const messageOf = (target: string) => (normalizePath(target) as { message: string }).message;
    expect(messageOf('/admin;x=1')).toContain('";"');
    expect(messageOf('/%252e')).toContain('double');
    expect(messageOf('/%EF%BC%8E')).toContain('U+FF0E');
    expect(messageOf('/\u2215')).toContain('U+2215');
    expect(messageOf('/admin./x')).toContain('ends in "." or an encoded space');
    expect(messageOf('/%C0%AE')).toContain('UTF-8');
  });

  test('a rule path and every spelling of the same resource have one canonical form', () => {
    expect(canonicalRulePath('/\u00fc')).toBe('/%C3%BC');
    expect(canonicalRulePath('/caf\u00e9/**')).toBe('/caf%C3%A9/**');
    expect(canonicalRulePath('/users/*/profile')).toBe('/users/*/profile');
    expect(canonicalRulePath("/a-b._~!$&'()*+,;=:@/Z9")).toBe("/a-b._~!$&'()*+,;=:@/Z9");
    expect(canonicalRulePath('/a b"<>[]^`{|}%?#')).toBe('/a%20b%22%3C%3E%5B%5D%5E%60%7B%7C%7D%25%3F%23');
    expect(canonicalRulePath('/\u{1F600}')).toBe('/%F0%9F%98%80');
    for (const spelling of ['/%c3%bc', '/%C3%BC', '/\u00fc', '/%c3%Bc/', '/x/../%C3%bc']) {
      expect(pathSegments((normalizePath(spelling) as { path: string }).path)).toEqual(
        pathSegments(canonicalRulePath('/\u00fc')),
      );
    }
  });

  test('the dot-like and slash-like set is what NFKC folds into only `.`, `/` or `\\`, plus three slashes', () => {
    // Windows best-fit and look-alike slashes NFKC leaves alone: U+2044, U+2215, U+29F8
    const expected = [0x2044, 0x2215, 0x29f8];
    for (let cp = 0x80; cp <= 0x10ffff; cp++) {
      if (cp >= 0xd800 && cp <= 0xdfff) continue;
      const folded = String.fromCodePoint(cp).normalize('NFKC');
      if (/^[./\\]+$/.test(folded)) expected.push(cp);
    }
    const refused: number[] = [];
    for (let cp = 0x80; cp <= 0x10ffff; cp++) {
      if (cp >= 0xd800 && cp <= 0xdfff) continue;
      const result = normalizePath(`/a${String.fromCodePoint(cp)}`);
      if (!result.ok && result.code === 'PATH_CONFUSABLE_CHARACTER') refused.push(cp);
    }
    expect(refused).toEqual(expected.sort((a, b) => a - b));
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
  'PATH_PARAMETERS',
  'PATH_DOUBLE_ENCODED',
  'PATH_CONFUSABLE_CHARACTER',
  'PATH_TRAILING_DOT_OR_SPACE',
  'PATH_INVALID_UTF8',
  'PATH_DOT_DOT_NAME',
  'PATH_UNSAFE_UNICODE',
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
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      '%3b',
      '%20',
      '%32',
      '%65',
      '%c0%ae',
      '%80',
      '%e4%b8',
      '%ed%a0%80',
      '%f4%90%80%80',
      '%ef%bc%8e',
      '%E2%88%95',
      '%e2%80%a5',
      '\uff0e',
      '\u2215',
      '\uff3c',
    ),
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

/** Strings of unreserved characters not ending in `.` nor starting with `..`: segments that need no normalisation. */
const safeSegmentArb = fc
  .string({ unit: fc.constantFrom(...UNRESERVED), minLength: 1, maxLength: 8 })
  .filter((s) => !s.endsWith('.') && !s.startsWith('..'));
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

/** The dot-like and slash-like code points, derived another way: NFKC, plus three slashes it leaves. */
const isConfusable = (ch: string) =>
  (ch > '\x7f' && /^[./\\]+$/.test(ch.normalize('NFKC'))) || ['\u2044', '\u2215', '\u29f8'].includes(ch);

/** The bytes a raw path stands for: escapes as their byte, other characters as UTF-8. */
function pathBytes(rawPath: string): Uint8Array {
  const parts = rawPath.split(/(%[0-9A-Fa-f]{2})/);
  const bytes = parts.flatMap((part, index) =>
    index % 2 === 1 ? [Number.parseInt(part.slice(1), 16)] : [...Buffer.from(part, 'utf8')],
  );
  return Uint8Array.from(bytes);
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
  if (/;|%3b/i.test(rawPath)) codes.add('PATH_PARAMETERS');
  const bytes = pathBytes(rawPath);
  try {
    new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    codes.add('PATH_INVALID_UTF8');
  }
  // invalid sequences decode to U+FFFD here, so a confusable beside them is still seen
  const text = new TextDecoder('utf-8', { ignoreBOM: true }).decode(bytes);
  if ([...text].some(isConfusable)) codes.add('PATH_CONFUSABLE_CHARACTER');
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
  for (const segment of decoded) {
    if (/%25[0-9A-F]{2}/i.test(segment)) codes.add('PATH_DOUBLE_ENCODED');
    if (segment !== '.' && segment !== '..' && /(\.|%20)$/.test(segment)) {
      codes.add('PATH_TRAILING_DOT_OR_SPACE');
    }
    if (segment !== '..' && segment.startsWith('..')) codes.add('PATH_DOT_DOT_NAME');
  }
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

/** Characters of a rule path: ASCII (weighted to the ones that need care), any code point, lone surrogates. */
const ruleCharArb = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom(...UNRESERVED) },
  { weight: 3, arbitrary: fc.constantFrom('/', '*', '.', ';', '%', ' ', '?', '#', '!', '@', ':', '"', '\\') },
  { weight: 2, arbitrary: fc.integer({ min: 0, max: 0x7f }).map((c) => String.fromCharCode(c)) },
  {
    weight: 4,
    arbitrary: fc
      .integer({ min: 0x80, max: 0x10ffff })
      .filter((cp) => cp < 0xd800 || cp > 0xdfff)
      .map((cp) => String.fromCodePoint(cp)),
  },
  { weight: 1, arbitrary: fc.constantFrom('\u00fc', '\uff0e', '\u2215', '\u00a0', '\ud800', '\udfff') },
);

const segmentCharArb = ruleCharArb.filter((ch) => ch !== '/');

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
        .map((cp) => String.fromCodePoint(cp))
        .filter((ch) => !isConfusable(ch)),
    );
    fc.assert(
      fc.property(fc.array(charArb, { minLength: 1, maxLength: 12 }), fc.boolean(), (chars, lowerCase) => {
        const raw = `/${chars.join('')}`;
        const escaped = raw.replace(/[^\x00-\x7f]/gu, (ch) => {
          const e = encodeURIComponent(ch);
          return lowerCase ? e.toLowerCase() : e;
        });
        const result = normalizePath(raw);
        // accepted, unless folding makes it another path (`⅐` folds to `1⁄7`, a fraction slash)
        if (!result.ok) expect(result.code).toBe('PATH_UNSAFE_UNICODE');
        expect(normalizePath(escaped)).toEqual(result);
      }),
      { numRuns: NUM_RUNS },
    );
  });

  test('a rule path in canonical form is a fixed point of normalizePath, or refused for a reason', () => {
    // refusals a rule path can run into; the rules API should refuse such a path, as it could never match
    const ruleRefusals = new Set<string>([
      'PATH_PARAMETERS',
      'PATH_TRAILING_DOT_OR_SPACE',
      'PATH_CONTROL_CHAR',
      'PATH_BACKSLASH',
      'PATH_CONFUSABLE_CHARACTER',
      'PATH_DOUBLE_ENCODED',
      'PATH_INVALID_ENCODING',
      'PATH_UNSAFE_UNICODE',
      'PATH_DOT_DOT_NAME',
    ]);
    const segmentArb = fc
      .string({ unit: segmentCharArb, minLength: 1, maxLength: 8 })
      .filter((x) => x !== '.' && x !== '..');
    fc.assert(
      fc.property(fc.array(segmentArb, { maxLength: 6 }), fc.boolean(), (segments, trailing) => {
        const canonical = canonicalRulePath(safePath(segments, trailing));
        const result = normalizePath(canonical);
        if (result.ok) expect(result).toEqual({ ok: true, path: canonical, query: '' });
        else expect(ruleRefusals).toContain(result.code);
      }),
      { numRuns: NUM_RUNS },
    );
  });

  test('plain rule paths of any Unicode are always accepted unchanged in canonical form', () => {
    const plainArb = segmentCharArb.filter(
      (ch) =>
        !/[;\s\\%\x00-\x1f\x7f]/.test(ch) &&
        !isConfusable(ch) &&
        // nor what Unicode folding turns into one of those, or into `.` and `/` (`⅐` is `1⁄7`)
        !/[;\s\\%./\u2044\u2215\u29f8]/.test(ch.normalize('NFKC')) &&
        !(ch.length === 1 && ch >= '\ud800' && ch <= '\udfff'),
    );
    const segmentArb = fc
      .string({ unit: plainArb, minLength: 1, maxLength: 8 })
      .filter((x) => !x.endsWith('.') && !x.startsWith('..'));
    fc.assert(
      fc.property(fc.array(segmentArb, { maxLength: 6 }), fc.boolean(), (segments, trailing) => {
        const canonical = canonicalRulePath(safePath(segments, trailing));
        expect(normalizePath(canonical)).toEqual({ ok: true, path: canonical, query: '' });
      }),
      { numRuns: NUM_RUNS },
    );
  });

  test('every spelling of a rule path normalises like its canonical form', () => {
    // a request spells each character raw or percent-encoded (any hex case) where that names the same
    // resource: unreserved and non-ASCII characters either way, characters canonicalRulePath encodes encoded
    const spellingArb = fc
      .array(fc.tuple(ruleCharArb, fc.boolean(), fc.boolean()), { maxLength: 24 })
      .map((chars) => {
        let rule = '/';
        let request = '/';
        for (const [ch, encode, lowerCase] of chars) {
          rule += ch;
          const lone = ch.length === 1 && ch >= '\ud800' && ch <= '\udfff';
          const kept = canonicalRulePath(ch) === ch;
          if (
            ch === '/' ||
            lone ||
            (kept && !(encode && isUnreservedChar(ch))) ||
            (!kept && !encode && ch > '\x7f')
          ) {
            request += ch;
          } else {
            const bytes = [...Buffer.from(ch, 'utf8')].map((b) => `%${b.toString(16).padStart(2, '0')}`);
            request += lowerCase ? bytes.join('').toLowerCase() : bytes.join('').toUpperCase();
          }
        }
        return { rule, request };
      });
    fc.assert(
      fc.property(spellingArb, ({ rule, request }) => {
        expect(normalizePath(request)).toEqual(normalizePath(canonicalRulePath(rule)));
      }),
      { numRuns: NUM_RUNS },
    );
  });
});
