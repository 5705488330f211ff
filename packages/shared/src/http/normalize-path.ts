/**
 * The one path normaliser (SPEC §4). The gateway matches rules against its output and forwards exactly
 * that output upstream, so the matcher and the upstream never see two different paths.
 *
 * Decisions that matter for security:
 * - We percent-decode ONCE, and only unreserved characters (ALPHA DIGIT - . _ ~). `%252e` is the escape
 *   `%25` followed by the literal text `2e`; it stays `%252e` and is never decoded a second time. Every
 *   other escape stays encoded with uppercase hex, so two spellings of one path give one string.
 * - What we cannot normalise safely is rejected, never repaired: encoded `/`, `\` raw or encoded, control
 *   characters raw or encoded, raw whitespace, broken escapes, and `..` above the root (no clamping).
 * - `#` (a fragment) is not allowed in an HTTP request-target; Node still passes it through in `req.url`.
 *   Stripping it would silently change what we forward, so any raw `#`, in the path or the query, is a
 *   rejection (PATH_NOT_ORIGIN_FORM).
 * - The query is kept verbatim (not decoded, not re-encoded); only raw control characters, whitespace and
 *   `#` are rejected there, because they cannot be forwarded safely.
 * - Raw non-ASCII characters are UTF-8 percent-encoded so they equal their encoded spelling. Node 20's
 *   HTTP/1 parser answers 400 to raw non-ASCII itself, so this only matters for strings from elsewhere.
 *   Percent-encoded bytes >= 0x80 are kept as opaque bytes (uppercase hex), not validated as UTF-8.
 * - Repeated `/` collapse before dot segments resolve: `/a//..` is `/a/..` is `/`.
 *
 * Speed: one pass. A first scan accepts the common already-normal path without building anything (the
 * output is the input, or its slice up to `?`); at the first irregular segment it hands over to the full
 * loop, which resumes at that segment rather than restarting. No regular expressions, no arrays.
 */

export type PathErrorCode =
  | 'PATH_NOT_ORIGIN_FORM'
  | 'PATH_TOO_LONG'
  | 'PATH_INVALID_ENCODING'
  | 'PATH_ENCODED_SLASH'
  | 'PATH_BACKSLASH'
  | 'PATH_CONTROL_CHAR'
  | 'PATH_ESCAPES_ROOT';

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

const CHAR_CLASS = new Uint8Array(128);
for (let c = 0; c <= 0x20; c++) CHAR_CLASS[c] = CONTROL;
CHAR_CLASS[0x7f] = CONTROL;
CHAR_CLASS[0x2e] = DOT;
CHAR_CLASS[0x2f] = SLASH;
CHAR_CLASS[0x3f] = QUERY;
CHAR_CLASS[0x25] = PERCENT;
CHAR_CLASS[0x5c] = BACKSLASH_CHAR;
CHAR_CLASS[0x23] = HASH;

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

  // Fast scan: stops at `?`, at the end, or at the first segment that needs work.
  let i = 1;
  let segStart = 1;
  let dotsOnly = true; // the current segment so far has only dots (a possible `.` or `..`)
  let normal = true;
  for (; i < len; i++) {
    const c = target.charCodeAt(i);
    const cls = c < 128 ? CHAR_CLASS[c] : NON_ASCII;
    if (cls === PLAIN) {
      dotsOnly = false;
    } else if (cls === DOT) {
      // a dot in a longer name (`a.json`, `...`) is plain; decided at the segment end
    } else if (cls === SLASH) {
      const segLength = i - segStart;
      if (segLength === 0 || (dotsOnly && segLength <= 2)) {
        normal = false; // `//`, `/./` or `/../`
        break;
      }
      segStart = i + 1;
      dotsOnly = true;
    } else if (cls === QUERY) {
      break;
    } else {
      normal = false;
      break;
    }
  }
  // The last segment may be `.` or `..` (an empty one is a trailing slash, which is kept).
  if (normal && dotsOnly && i - segStart > 0 && i - segStart <= 2) normal = false;

  let path: string;
  let pathEnd: number; // index of the `?`, or len
  if (normal) {
    pathEnd = i;
    path = i === len ? target : target.slice(0, i);
  } else {
    // Full loop, resuming at the first irregular segment. Everything before it is already normal:
    // `out` holds it without its trailing slash ('' for the root). Segments are appended as `/seg`.
    let out = target.slice(0, segStart - 1);
    let seg = '';
    let chunkStart = segStart; // start of the raw run not yet copied into `seg`
    for (i = segStart; ; i++) {
      const c = i < len ? target.charCodeAt(i) : 0x3f; // the end behaves like `?`
      const cls = c < 128 ? CHAR_CLASS[c] : NON_ASCII;
      if (cls === PLAIN || cls === DOT) continue;
      if (cls === SLASH || cls === QUERY) {
        if (chunkStart < i)
          seg = seg === '' ? target.slice(chunkStart, i) : seg + target.slice(chunkStart, i);
        const dotSegment = seg === '' || seg === '.' || seg === '..';
        if (seg === '..') {
          if (out.length === 0) return ESCAPES_ROOT;
          out = out.slice(0, out.lastIndexOf('/'));
        } else if (!dotSegment) {
          out = out + '/' + seg;
        }
        if (cls === QUERY) {
          pathEnd = i;
          // The path ends with `/` if its last segment was empty, `.` or `..` (RFC 3986 5.2.4).
          path = out.length === 0 ? '/' : dotSegment ? out + '/' : out;
          break;
        }
        seg = '';
        chunkStart = i + 1;
        continue;
      }
      if (cls === PERCENT) {
        const high = hexAt(target, i + 1);
        const low = hexAt(target, i + 2);
        if (high < 0 || low < 0) return INVALID_ESCAPE;
        const byte = (high << 4) | low;
        if (byte === 0x2f) return ENCODED_SLASH;
        if (byte === 0x5c) return BACKSLASH;
        if (byte < 0x20 || byte === 0x7f) return PATH_CONTROL;
        if (chunkStart < i) seg += target.slice(chunkStart, i);
        seg += ESCAPE_OUTPUT[byte]!;
        i += 2;
        chunkStart = i + 1;
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
        if (chunkStart < i) seg += target.slice(chunkStart, i);
        seg += utf8PercentEncoded(codePoint);
        i += units - 1;
        chunkStart = i + 1;
        continue;
      }
      if (cls === BACKSLASH_CHAR) return BACKSLASH;
      if (cls === HASH) return FRAGMENT;
      return PATH_CONTROL;
    }
  }

  if (pathEnd === len) return { ok: true, path, query: '' };
  for (let q = pathEnd + 1; q < len; q++) {
    const c = target.charCodeAt(q);
    if (c <= 0x20 || c === 0x7f) return QUERY_CONTROL;
    if (c === 0x23) return FRAGMENT;
  }
  return { ok: true, path, query: target.slice(pathEnd + 1) };
}
