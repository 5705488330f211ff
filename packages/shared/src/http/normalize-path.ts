/**
 * The one path normaliser (docs/paths.md). The gateway matches rules against its output and forwards exactly
 * that output upstream, so the matcher and the upstream never see two different paths. User-facing
 * description, with what Tomcat, Spring, IIS and Express make of each spelling: docs/paths.md.
 *
 * Decisions that matter for security:
 * - We percent-decode ONCE, and only unreserved characters (ALPHA DIGIT - . _ ~). Every other escape
 *   stays encoded with uppercase hex, so two spellings of one path give one string.
 * - What we cannot normalise safely is rejected, never repaired: encoded `/`, `\` raw or encoded, control
 *   characters raw or encoded, raw whitespace, broken escapes, and `..` above the root (no clamping).
 * - Spellings that some upstream reads as another path are rejected too, because we cannot know which
 *   reading the upstream will use: `;` path parameters (Tomcat, Spring drop them), an escape that decodes
 *   to another escape (`%252e`: an upstream that decodes twice sees `.`), a segment starting with `..`
 *   (@fastify/reply-from refuses `/..` anywhere in a decoded path, after the request was charged), escapes that are not UTF-8
 *   (`%C0%AE`, an overlong `.`), Unicode that NFKC or Windows best-fit turn into `.`, `/` or `\`, and a
 *   segment ending in `.` or space (Windows drops them: `/admin./x` is `/admin/x` on IIS). These checks
 *   look at every segment as sent, including one a later `..` removes.
 * - `#` (a fragment) is not allowed in an HTTP request-target; Node still passes it through in `req.url`.
 *   Stripping it would silently change what we forward, so any raw `#`, in the path or the query, is a
 *   rejection (PATH_NOT_ORIGIN_FORM).
 * - The query is kept verbatim (not decoded, not re-encoded); only raw control characters, whitespace and
 *   `#` are rejected there, because they cannot be forwarded safely. `;` in the query is fine.
 * - Raw non-ASCII characters are UTF-8 percent-encoded so they equal their encoded spelling. The input is
 *   text (UTF-16), not bytes read as latin1. Node 20's HTTP/1 parser answers 400 to raw non-ASCII bytes
 *   itself (even with `insecureHTTPParser`), so this only matters for strings from elsewhere (rule paths,
 *   configuration, tests). `canonicalRulePath` encodes a rule's path the same way.
 * - Repeated `/` collapse before dot segments resolve: `/a//..` is `/a/..` is `/`.
 * - Rules match the path Unicode-folded (`matchingPath`: NFKC, default-ignorable code points removed,
 *   normalised again), because upstreams that fold read `/ｓecret` as `/secret`; the path forwarded is
 *   the unfolded one. A path whose folded form would be refused is refused (PATH_UNSAFE_UNICODE).
 *
 * Speed: one pass. A first scan accepts the common already-normal path without building anything (the
 * output is the input, or its slice up to `?`); at the first irregular segment (`//`, `%`, a segment
 * ending in `.`, anything not plain ASCII) it hands over to the full loop, which resumes at that segment
 * rather than restarting. In the full loop, escapes already in their output form (uppercase, not
 * unreserved) stay in the raw run and are copied with it. No regular expressions, no arrays.
 */

import { foldText } from './fold-text.js';

export type PathErrorCode =
  | 'PATH_NOT_ORIGIN_FORM'
  | 'PATH_TOO_LONG'
  | 'PATH_INVALID_ENCODING'
  | 'PATH_ENCODED_SLASH'
  | 'PATH_BACKSLASH'
  | 'PATH_CONTROL_CHAR'
  | 'PATH_ESCAPES_ROOT'
  | 'PATH_PARAMETERS'
  | 'PATH_DOUBLE_ENCODED'
  | 'PATH_CONFUSABLE_CHARACTER'
  | 'PATH_TRAILING_DOT_OR_SPACE'
  | 'PATH_INVALID_UTF8'
  | 'PATH_UNSAFE_UNICODE'
  | 'PATH_DOT_DOT_NAME';

export type NormalizedTarget =
  | { ok: true; path: string; query: string }
  | { ok: false; code: PathErrorCode; message: string };

/** Longest raw request-target (in UTF-16 code units, as `req.url.length` counts) accepted by default. */
export const DEFAULT_MAX_TARGET_LENGTH = 8192;

type PathError = Extract<NormalizedTarget, { ok: false }>;

// Errors are shared frozen values: a flood of bad requests allocates nothing for them.
const fail = (code: PathErrorCode, message: string): PathError => Object.freeze({ ok: false, code, message });

const NOT_ORIGIN_FORM = fail(
  'PATH_NOT_ORIGIN_FORM',
  'request-target must be in origin-form (start with "/"); absolute-form, authority-form and "*" are not accepted',
);
const FRAGMENT = fail('PATH_NOT_ORIGIN_FORM', 'request-target contains a fragment ("#")');
const INVALID_ESCAPE = fail(
  'PATH_INVALID_ENCODING',
  'path contains invalid percent-encoding ("%" not followed by two hex digits)',
);
const LONE_SURROGATE = fail('PATH_INVALID_ENCODING', 'path contains an unpaired UTF-16 surrogate');
const ENCODED_SLASH = fail('PATH_ENCODED_SLASH', 'path contains an encoded slash (%2F)');
const BACKSLASH = fail('PATH_BACKSLASH', 'path contains a backslash ("\\" or %5C)');
const PATH_CONTROL = fail(
  'PATH_CONTROL_CHAR',
  'path contains a control character or whitespace (raw, or encoded as %00-%1F or %7F)',
);
const QUERY_CONTROL = fail('PATH_CONTROL_CHAR', 'query contains a raw control character or whitespace');
const ESCAPES_ROOT = fail('PATH_ESCAPES_ROOT', 'path climbs above the root with ".."');
const PARAMETERS = fail(
  'PATH_PARAMETERS',
  'path contains ";" (raw or %3B): some servers read it as path parameters and drop them',
);
const DOUBLE_ENCODED = fail(
  'PATH_DOUBLE_ENCODED',
  'path contains a double-encoded escape (%25 followed by two hex digits)',
);
const TRAILING_DOT_OR_SPACE = fail(
  'PATH_TRAILING_DOT_OR_SPACE',
  'a path segment ends in "." or an encoded space (%20): Windows servers drop them',
);
const DOT_DOT_NAME = fail(
  'PATH_DOT_DOT_NAME',
  'a path segment starts with ".." (as in "..x"): the proxy refuses such paths as a step up, and so do some servers',
);
const INVALID_UTF8 = fail('PATH_INVALID_UTF8', 'path contains percent-escapes that are not valid UTF-8');
/** A path whose Unicode-folded form (what rules match) cannot be normalised safely: why, in its words. */
const unsafeFolding = (folded: PathError): PathError =>
  fail(
    'PATH_UNSAFE_UNICODE',
    `path reads as another path once Unicode is folded (NFKC, zero-width characters removed): ${folded.message}`,
  );

/**
 * Characters some servers turn into `.`, `/` or `\`: every code point whose NFKC form is made only of
 * those (fullwidth and small forms, dot leaders, ellipses; the test derives this part from NFKC itself),
 * and the three slash symbols that Unicode's confusables list (UTS #39) maps to `/` and best-fit
 * conversions may turn into one. Deliberately small: letters and digits of other scripts that merely
 * look like `.` or `/` (Arabic-Indic zero, Katakana NO) are words, and are not refused.
 */
const CONFUSABLE_NAMES: ReadonlyMap<number, string> = new Map([
  [0x2024, 'ONE DOT LEADER'],
  [0x2025, 'TWO DOT LEADER'],
  [0x2026, 'HORIZONTAL ELLIPSIS'],
  [0x2044, 'FRACTION SLASH'],
  [0x2215, 'DIVISION SLASH'],
  [0x29f8, 'BIG SOLIDUS'],
  [0xfe19, 'PRESENTATION FORM FOR VERTICAL HORIZONTAL ELLIPSIS'],
  [0xfe30, 'PRESENTATION FORM FOR VERTICAL TWO DOT LEADER'],
  [0xfe52, 'SMALL FULL STOP'],
  [0xfe68, 'SMALL REVERSE SOLIDUS'],
  [0xff0e, 'FULLWIDTH FULL STOP'],
  [0xff0f, 'FULLWIDTH SOLIDUS'],
  [0xff3c, 'FULLWIDTH REVERSE SOLIDUS'],
]);
const CONFUSABLE = new Map<number, PathError>(
  [...CONFUSABLE_NAMES].map(([codePoint, name]) => {
    const hex = codePoint.toString(16).toUpperCase().padStart(4, '0');
    return [
      codePoint,
      fail(
        'PATH_CONFUSABLE_CHARACTER',
        `path contains U+${hex} ${name} (raw or percent-encoded), which some servers read as ".", "/" or "\\"`,
      ),
    ];
  }),
);
const CONFUSABLE_MIN = Math.min(...CONFUSABLE.keys());
const CONFUSABLE_MAX = Math.max(...CONFUSABLE.keys());

const tooLongErrors = new Map<number, PathError>();
function tooLong(maxLength: number): PathError {
  let error = tooLongErrors.get(maxLength);
  if (error === undefined) {
    error = fail('PATH_TOO_LONG', `request-target is longer than ${maxLength} characters`);
    if (tooLongErrors.size < 16) tooLongErrors.set(maxLength, error);
  }
  return error;
}

// Character classes of ASCII code units; every code unit >= 0x80 is NON_ASCII.
const PLAIN = 0; // needs nothing: kept as it is
const DOT = 1;
const SLASH = 2;
const QUERY = 3;
const PERCENT = 4;
const BACKSLASH_CHAR = 5;
const HASH = 6;
const CONTROL = 7; // C0 controls, space, DEL
const NON_ASCII = 8;
const SEMICOLON = 9;

const CHAR_CLASS = new Uint8Array(128);
for (let c = 0; c <= 0x20; c++) CHAR_CLASS[c] = CONTROL;
CHAR_CLASS[0x7f] = CONTROL;
CHAR_CLASS[0x2e] = DOT;
CHAR_CLASS[0x2f] = SLASH;
CHAR_CLASS[0x3f] = QUERY;
CHAR_CLASS[0x25] = PERCENT;
CHAR_CLASS[0x5c] = BACKSLASH_CHAR;
CHAR_CLASS[0x23] = HASH;
CHAR_CLASS[0x3b] = SEMICOLON;

const HEX_VALUE = new Int8Array(128).fill(-1);
for (let d = 0; d < 10; d++) HEX_VALUE[0x30 + d] = d;
for (let d = 0; d < 6; d++) {
  HEX_VALUE[0x41 + d] = 10 + d;
  HEX_VALUE[0x61 + d] = 10 + d;
}

const isUnreserved = (byte: number): boolean =>
  (byte >= 0x30 && byte <= 0x39) ||
  (byte >= 0x41 && byte <= 0x5a) ||
  (byte >= 0x61 && byte <= 0x7a) ||
  byte === 0x2d ||
  byte === 0x2e ||
  byte === 0x5f ||
  byte === 0x7e;

/** `%XX` with uppercase hex, for every byte. */
const PERCENT_ENCODED: readonly string[] = Array.from(
  { length: 256 },
  (_, byte) => `%${byte.toString(16).toUpperCase().padStart(2, '0')}`,
);
/** What a valid escape of `byte` becomes: the character if unreserved, else its uppercase escape. */
const ESCAPE_OUTPUT: readonly string[] = PERCENT_ENCODED.map((encoded, byte) =>
  isUnreserved(byte) ? String.fromCharCode(byte) : encoded,
);

function utf8PercentEncoded(codePoint: number): string {
  const e = PERCENT_ENCODED;
  if (codePoint < 0x800) return e[0xc0 | (codePoint >> 6)]! + e[0x80 | (codePoint & 0x3f)]!;
  if (codePoint < 0x10000) {
    return (
      e[0xe0 | (codePoint >> 12)]! + e[0x80 | ((codePoint >> 6) & 0x3f)]! + e[0x80 | (codePoint & 0x3f)]!
    );
  }
  return (
    e[0xf0 | (codePoint >> 18)]! +
    e[0x80 | ((codePoint >> 12) & 0x3f)]! +
    e[0x80 | ((codePoint >> 6) & 0x3f)]! +
    e[0x80 | (codePoint & 0x3f)]!
  );
}

function hexAt(s: string, index: number): number {
  if (index >= s.length) return -1;
  const c = s.charCodeAt(index);
  return c < 128 ? HEX_VALUE[c]! : -1;
}

/**
 * The code point that the escapes starting at `s[index]` (`%XX` with lead byte `lead` >= 0x80, then
 * its continuation bytes, also as escapes) encode in UTF-8, or -1 if they are not well-formed UTF-8
 * (Unicode table 3-7): no lone continuation bytes, no overlong forms (`%C0%AE`), no surrogates, nothing
 * above U+10FFFF, no truncated sequences. Well-formed UTF-8 re-encodes to the very same bytes.
 */
function utf8CodePointAt(s: string, index: number, lead: number): number {
  let count: number;
  let codePoint: number;
  let lower = 0x80; // range of the first continuation byte
  let upper = 0xbf;
  if (lead >= 0xc2 && lead <= 0xdf) {
    count = 1;
    codePoint = lead & 0x1f;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    count = 2;
    codePoint = lead & 0x0f;
    if (lead === 0xe0) lower = 0xa0;
    else if (lead === 0xed) upper = 0x9f;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    count = 3;
    codePoint = lead & 0x07;
    if (lead === 0xf0) lower = 0x90;
    else if (lead === 0xf4) upper = 0x8f;
  } else {
    return -1;
  }
  for (let k = 1; k <= count; k++) {
    const at = index + 3 * k;
    if (at >= s.length || s.charCodeAt(at) !== 0x25) return -1;
    const high = hexAt(s, at + 1);
    const low = hexAt(s, at + 2);
    if (high < 0 || low < 0) return -1;
    const byte = (high << 4) | low;
    if (byte < lower || byte > upper) return -1;
    lower = 0x80;
    upper = 0xbf;
    codePoint = (codePoint << 6) | (byte & 0x3f);
  }
  return codePoint;
}

/** Whether the escapes in `s[start..end)` (already validated) use a lowercase hex digit. */
function hasLowerCaseHex(s: string, start: number, end: number): boolean {
  for (let at = start + 1; at < end; at += 3) {
    // `a`-`f` are the only code units >= 0x61 a valid escape can hold
    if (s.charCodeAt(at) >= 0x61 || s.charCodeAt(at + 1) >= 0x61) return true;
  }
  return false;
}

/** Bytes in the UTF-8 form of `codePoint` (>= 0x80). */
const utf8Length = (codePoint: number): number => (codePoint < 0x800 ? 2 : codePoint < 0x10000 ? 3 : 4);

/**
 * Whether a finished segment as it will be forwarded (unreserved escapes decoded, others uppercase) holds
 * `%25` followed by two hex digits: an escape that decodes to another escape. The digits may themselves
 * have arrived encoded (`%25%32%65`), hence a check on the output rather than on the raw escapes.
 */
function hasDoubleEncoding(seg: string): boolean {
  for (let at = seg.indexOf('%25'); at >= 0; at = seg.indexOf('%25', at + 3)) {
    if (hexAt(seg, at + 3) >= 0 && hexAt(seg, at + 4) >= 0) return true;
  }
  return false;
}

/**
 * Normalises a raw request-target (`req.url`: path plus optional `?query`) for matching and forwarding.
 * `maxLength` bounds the raw target in UTF-16 code units.
 */
export function normalizePath(
  target: string,
  maxLength: number = DEFAULT_MAX_TARGET_LENGTH,
): NormalizedTarget {
  const len = target.length;
  if (len === 0 || target.charCodeAt(0) !== 0x2f) return NOT_ORIGIN_FORM;
  if (len > maxLength) return tooLong(maxLength);

  // Fast scan: stops at `?`, at the end, or at the first segment that needs work. A segment ending in
  // `.` is `.`, `..` (resolved) or a name like `a.` (refused): the full loop tells them apart.
  let i = 1;
  let segStart = 1;
  let lastDot = -1; // index of the last `.` seen
  let normal = true;
  for (; i < len; i++) {
    const c = target.charCodeAt(i);
    const cls = c < 128 ? CHAR_CLASS[c] : NON_ASCII;
    if (cls === PLAIN) continue;
    if (cls === DOT) {
      if (lastDot === i - 1 && lastDot === segStart) {
        normal = false; // a segment starting with `..`
        break;
      }
      lastDot = i;
    } else if (cls === SLASH) {
      if (i === segStart || lastDot === i - 1) {
        normal = false; // `//`, or a segment ending in `.`
        break;
      }
      segStart = i + 1;
    } else if (cls === QUERY) {
      break;
    } else {
      normal = false;
      break;
    }
  }
  // The last segment too (an empty one is a trailing slash, which is kept).
  if (lastDot === i - 1) normal = false;

  if (!normal) return normalizeFrom(target, segStart, true);
  return withQuery(target, i === len ? target : target.slice(0, i), i);
}

/** The result for a normalised `path` whose raw form ends at `pathEnd` (the `?`, or the end). */
function withQuery(target: string, path: string, pathEnd: number): NormalizedTarget {
  const len = target.length;
  if (pathEnd === len) return { ok: true, path, query: '' };
  for (let q = pathEnd + 1; q < len; q++) {
    const c = target.charCodeAt(q);
    if (c <= 0x20 || c === 0x7f) return QUERY_CONTROL;
    if (c === 0x23) return FRAGMENT;
  }
  return { ok: true, path, query: target.slice(pathEnd + 1) };
}

/**
 * The full loop, resuming at `segStart`, the first irregular segment. Everything before it is already
 * normal: `out` holds it without its trailing slash ('' for the root). Segments are appended as `/seg`.
 * A function of its own so that the fast scan stays small.
 */
function normalizeFrom(target: string, segStart: number, checkFolding: boolean): NormalizedTarget {
  const len = target.length;
  let nonAscii = false; // the output holds a non-ASCII character (as its UTF-8 escapes)
  let out = target.slice(0, segStart - 1);
  let seg = '';
  let hasPercent25 = false; // the segment holds an escaped `%`
  let tail = 0; // the last character rewritten into `seg` if ASCII, else 0
  let chunkStart = segStart; // start of the raw run not yet copied into `seg`
  for (let i = segStart; ; i++) {
    const c = i < len ? target.charCodeAt(i) : 0x3f; // the end behaves like `?`
    const cls = c < 128 ? CHAR_CLASS[c] : NON_ASCII;
    if (cls === PLAIN || cls === DOT) continue;
    if (cls === SLASH || cls === QUERY) {
      // Does the segment end in `.` or an encoded space? Read from the raw run or `tail`, not from `seg`,
      // which would flatten it. (`%20` is always kept in the raw run: it has no hex letters.)
      let trailing: boolean;
      if (chunkStart < i) {
        const last = target.charCodeAt(i - 1);
        trailing = last === 0x2e || (last === 0x30 && i - 3 >= chunkStart && target.startsWith('%20', i - 3));
        seg = seg === '' ? target.slice(chunkStart, i) : seg + target.slice(chunkStart, i);
      } else {
        trailing = tail === 0x2e || tail === 0x20;
      }
      if (trailing && seg !== '.' && seg !== '..') return TRAILING_DOT_OR_SPACE;
      if (seg.length > 2 && seg.charCodeAt(0) === 0x2e && seg.charCodeAt(1) === 0x2e) return DOT_DOT_NAME;
      if (hasPercent25 && hasDoubleEncoding(seg)) return DOUBLE_ENCODED;
      const dotSegment = seg === '' || seg === '.' || seg === '..';
      if (seg === '..') {
        if (out.length === 0) return ESCAPES_ROOT;
        out = out.slice(0, out.lastIndexOf('/'));
      } else if (!dotSegment) {
        out = out + '/' + seg;
      }
      if (cls === QUERY) {
        // The path ends with `/` if its last segment was empty, `.` or `..` (RFC 3986 5.2.4).
        const path = out.length === 0 ? '/' : dotSegment ? out + '/' : out;
        if (nonAscii && checkFolding) {
          const folded = fold(path);
          if (typeof folded !== 'string') return folded;
        }
        return withQuery(target, path, i);
      }
      seg = '';
      hasPercent25 = false;
      tail = 0;
      chunkStart = i + 1;
      continue;
    }
    if (cls === PERCENT) {
      const high = hexAt(target, i + 1);
      const low = hexAt(target, i + 2);
      if (high < 0 || low < 0) return INVALID_ESCAPE;
      const byte = (high << 4) | low;
      // An escape already in its output form (not unreserved, uppercase hex) stays in the raw run, so
      // the usual spellings copy nothing; the others are rewritten into `seg`.
      if (byte < 0x80) {
        if (byte === 0x2f) return ENCODED_SLASH;
        if (byte === 0x5c) return BACKSLASH;
        if (byte < 0x20 || byte === 0x7f) return PATH_CONTROL;
        if (byte === 0x3b) return PARAMETERS;
        if (byte === 0x25) hasPercent25 = true;
        const output = ESCAPE_OUTPUT[byte]!;
        if (output.length === 1 || target.charCodeAt(i + 1) >= 0x61 || target.charCodeAt(i + 2) >= 0x61) {
          if (chunkStart < i) seg += target.slice(chunkStart, i);
          seg += output;
          tail = byte;
          chunkStart = i + 3;
        }
        i += 2;
        continue;
      }
      const codePoint = utf8CodePointAt(target, i, byte);
      if (codePoint < 0) return INVALID_UTF8;
      nonAscii = true;
      if (codePoint >= CONFUSABLE_MIN && codePoint <= CONFUSABLE_MAX && CONFUSABLE.has(codePoint)) {
        return CONFUSABLE.get(codePoint)!;
      }
      const end = i + 3 * utf8Length(codePoint);
      if (hasLowerCaseHex(target, i, end)) {
        if (chunkStart < i) seg += target.slice(chunkStart, i);
        seg += target.slice(i, end).toUpperCase(); // well-formed UTF-8: the same bytes, uppercase hex
        tail = 0;
        chunkStart = end;
      }
      i = end - 1;
      continue;
    }
    if (cls === NON_ASCII) {
      let codePoint = c;
      let units = 1;
      if (c >= 0xd800 && c <= 0xdfff) {
        const next = i + 1 < len ? target.charCodeAt(i + 1) : 0;
        if (c > 0xdbff || next < 0xdc00 || next > 0xdfff) return LONE_SURROGATE;
        codePoint = 0x10000 + ((c - 0xd800) << 10) + (next - 0xdc00);
        units = 2;
      }
      if (codePoint >= CONFUSABLE_MIN && codePoint <= CONFUSABLE_MAX && CONFUSABLE.has(codePoint)) {
        return CONFUSABLE.get(codePoint)!;
      }
      if (chunkStart < i) seg += target.slice(chunkStart, i);
      seg += utf8PercentEncoded(codePoint);
      nonAscii = true;
      tail = 0;
      i += units - 1;
      chunkStart = i + 1;
      continue;
    }
    if (cls === SEMICOLON) return PARAMETERS;
    if (cls === BACKSLASH_CHAR) return BACKSLASH;
    if (cls === HASH) return FRAGMENT;
    return PATH_CONTROL;
  }
}

/** In a normalised path, a non-ASCII character is an escape of a byte >= 0x80, in uppercase hex. */
const NON_ASCII_ESCAPE = /%[89A-F]/;

/**
 * The form rules match a normalised path in (SPEC §4): decoded, Unicode-folded (`foldText`: NFKC,
 * default-ignorable code points removed), encoded again and normalised again, so `/%EF%BD%93ecret`
 * (`/ｓecret`) and `/se%E2%80%8Bcret` (a zero-width space) both become `/secret`, and `/x/.%E2%80%8B/a`
 * becomes `/x/a`. Or why that form cannot be normalised safely (`/％61dmin` folds to `/%61dmin`, an
 * escape an upstream would decode): `normalizePath` refuses such a path. A path without non-ASCII
 * characters is returned as it is.
 */
function fold(path: string): string | PathError {
  if (!NON_ASCII_ESCAPE.test(path)) return path;
  // the gateway folds a path twice in a row (normalising it, then matching it): the second is free
  if (path === lastFolded) return lastFold;
  // normalizePath let only well-formed escapes and UTF-8 through: this cannot throw
  const decoded = decodeURIComponent(path);
  const folded = foldText(decoded);
  let result: string | PathError = path;
  if (folded !== decoded) {
    const again = normalizeFrom(canonicalRulePath(folded), 1, false);
    result = again.ok ? again.path : unsafeFolding(again);
  }
  lastFolded = path;
  lastFold = result;
  return result;
}
/** The last path `fold` worked on, and its result. */
let lastFolded = '';
let lastFold: string | PathError = '';

/**
 * The path rules match for a path `normalizePath` returned: its Unicode-folded form (see `fold`). The
 * compiled matcher calls it on every request path and rule path; the path forwarded upstream stays
 * the normalised one.
 */
export function matchingPath(path: string): string {
  if (path.indexOf('%') === -1) return path;
  const folded = fold(path);
  return typeof folded === 'string' ? folded : path;
}

/** ASCII characters a rule path keeps as they are: unreserved, sub-delims, `:`, `@` and the `/` separator. */
const RULE_PATH_LITERAL = new Uint8Array(128);
for (const ch of "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,;=:@/") {
  RULE_PATH_LITERAL[ch.charCodeAt(0)] = 1;
}

/**
 * The form of a rule's `match.path` that `normalizePath` gives for every spelling of the same resource:
 * a rule path is literal text, so every character outside RFC 3986 unreserved, sub-delims, `:`, `@` and
 * `/` (non-ASCII, space, `%`, `?`, `#`, `"`, ...) is percent-encoded as UTF-8 with uppercase hex. `/ü`
 * becomes `/%C3%BC`, which is what `normalizePath` makes of `/ü`, `/%c3%bc` and `/%C3%BC`. The `*` and
 * `**` segments are sub-delims and stay as they are.
 *
 * Pure and total: it never throws. A lone UTF-16 surrogate is left in place, and nothing is checked here;
 * a rule path is usable only if `normalizePath(canonicalRulePath(path))` accepts it and returns it
 * unchanged (a path with `;`, a segment ending in `.` or space, control characters or `..` would not be).
 */
export function canonicalRulePath(path: string): string {
  let out = '';
  let chunkStart = 0;
  for (let i = 0; i < path.length; i++) {
    const c = path.charCodeAt(i);
    if (c < 128 && RULE_PATH_LITERAL[c] === 1) continue;
    let encoded: string;
    if (c < 128) {
      encoded = PERCENT_ENCODED[c]!;
    } else if (c >= 0xd800 && c <= 0xdfff) {
      const next = i + 1 < path.length ? path.charCodeAt(i + 1) : 0;
      if (c > 0xdbff || next < 0xdc00 || next > 0xdfff) continue; // lone surrogate: normalizePath refuses it
      encoded = utf8PercentEncoded(0x10000 + ((c - 0xd800) << 10) + (next - 0xdc00));
      out += path.slice(chunkStart, i) + encoded;
      i++;
      chunkStart = i + 1;
      continue;
    } else {
      encoded = utf8PercentEncoded(c);
    }
    out += path.slice(chunkStart, i) + encoded;
    chunkStart = i + 1;
  }
  return chunkStart === 0 ? path : out + path.slice(chunkStart);
}
