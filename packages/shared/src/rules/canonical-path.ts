/**
 * The one spelling a rule path and a request path share, so that `/ü` in a rule and `/%C3%BC` on the
 * wire name the same resource: every character outside RFC 3986's unreserved set, sub-delims, `:`,
 * `@` (and the `/` separator) is percent-encoded as UTF-8 with upper-case hex. Rule paths cannot hold
 * `%`, so nothing in them is encoded already.
 */
// TODO(lead): use http/normalize-path canonicalRulePath once merged

/** 1 for each ASCII code that stays as it is: ALPHA DIGIT - . _ ~ ! $ & ' ( ) * + , ; = : @ / */
const KEEP = new Uint8Array(128);
for (const c of "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,;=:@/") {
  KEEP[c.charCodeAt(0)] = 1;
}
const HEX = '0123456789ABCDEF';
const encoder = new TextEncoder();

/**
 * The canonical form of a rule path. The caller guarantees well-formed Unicode (the schema refuses
 * lone surrogates); an ASCII-only path without reserved characters comes back unchanged.
 */
export function canonicalRulePath(path: string): string {
  let out = '';
  let start = 0;
  for (let i = 0; i < path.length; i++) {
    const code = path.charCodeAt(i);
    if (code < 128 && KEEP[code] === 1) continue;
    out += path.slice(start, i);
    // a surrogate pair is one code point: encode both halves together
    const end = code >= 0xd800 && code <= 0xdbff && i + 1 < path.length ? i + 2 : i + 1;
    for (const byte of encoder.encode(path.slice(i, end))) out += `%${HEX[byte >> 4]}${HEX[byte & 15]}`;
    start = end;
    i = end - 1;
  }
  return start === 0 ? path : out + path.slice(start);
}
