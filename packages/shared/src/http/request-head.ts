/**
 * What Node's HTTP/1 parser (llhttp, as Node 20 runs it) lets through of a request head, and how it
 * reads it — for a front door that receives a request as data rather than off a socket (explain), so
 * that it refuses exactly what a gateway's parser refuses (the gateway answers each with 400
 * `SLUICE_BAD_REQUEST`) and reads field values exactly as a gateway reads them.
 *
 * Measured against Node 20 (request-head.test.ts sends every byte to a real server):
 * - a method is one of `http.METHODS`, case-sensitive (`get` is refused);
 * - a request-target holds only visible ASCII (0x21–0x7E): a raw space, tab, control character or any
 *   byte of UTF-8 is refused (a client sends `/café` as `/caf%C3%A9`);
 * - a field value may hold tabs and bytes 0x80–0xFF, read one byte per character (latin1), but no other
 *   control character; spaces and tabs around it are dropped (RFC 9110 §5.5).
 */
export type RequestHeadErrorCode = 'METHOD_INVALID' | 'TARGET_INVALID' | 'HEADER_INVALID';

export interface RequestHeadError {
  code: RequestHeadErrorCode;
  message: string;
}

/**
 * Node 20's `http.METHODS`: the methods its parser knows. Written out because the decision core imports
 * no HTTP module (decision/layers.test.ts); request-head.test.ts checks it against `http.METHODS`.
 */
export const PARSER_METHODS: ReadonlySet<string> = new Set([
  'ACL',
  'BIND',
  'CHECKOUT',
  'CONNECT',
  'COPY',
  'DELETE',
  'GET',
  'HEAD',
  'LINK',
  'LOCK',
  'M-SEARCH',
  'MERGE',
  'MKACTIVITY',
  'MKCALENDAR',
  'MKCOL',
  'MOVE',
  'NOTIFY',
  'OPTIONS',
  'PATCH',
  'POST',
  'PROPFIND',
  'PROPPATCH',
  'PURGE',
  'PUT',
  'QUERY',
  'REBIND',
  'REPORT',
  'SEARCH',
  'SOURCE',
  'SUBSCRIBE',
  'TRACE',
  'UNBIND',
  'UNLINK',
  'UNLOCK',
  'UNSUBSCRIBE',
]);

/** Why Node's parser refuses `method`; undefined when it takes it. */
export function methodError(method: string): RequestHeadError | undefined {
  if (PARSER_METHODS.has(method)) return undefined;
  const upper = method.toUpperCase();
  const hint = PARSER_METHODS.has(upper) ? ` (methods are case-sensitive: ${upper}?)` : '';
  return {
    code: 'METHOD_INVALID',
    message: `method ${JSON.stringify(method)} is not one the gateway's HTTP parser knows${hint}`,
  };
}

const hex = (codePoint: number) => codePoint.toString(16).toUpperCase().padStart(4, '0');

/** Why Node's parser refuses a request line with this target; undefined when it takes it. */
export function targetError(target: string): RequestHeadError | undefined {
  for (let i = 0; i < target.length; i++) {
    const c = target.charCodeAt(i);
    if (c > 0x20 && c < 0x7f) continue;
    const codePoint = target.codePointAt(i)!;
    const what = c < 0x80 ? 'a raw space or control character' : 'a raw non-ASCII character';
    const encoded =
      c < 0x80
        ? ''
        : `; clients send it percent-encoded as UTF-8 (${encodeURIComponent(String.fromCodePoint(codePoint))})`;
    return {
      code: 'TARGET_INVALID',
      message: `request-target holds ${what} (U+${hex(codePoint)}), which the gateway's HTTP parser refuses${encoded}`,
    };
  }
  return undefined;
}

/** What a field value may not hold: Node's parser refuses the request for any of these. */
const INVALID_FIELD_VALUE = /[\0-\x08\x0a-\x1f\x7f]/;
/** Spaces and tabs around a field value: Node's parser drops them. */
const OUTER_WHITESPACE = /^[ \t]+|[ \t]+$/g;
/** Beyond ASCII: sent as UTF-8, read back one byte per character. */
const NON_ASCII = /[^\0-\x7f]/;

/**
 * A field value as a gateway reads it off the wire, given the text a client sends (as UTF-8): each
 * byte one character (so `é` reads as `Ã©`, exactly what a gateway keys and compares), spaces and
 * tabs around it dropped. An error when Node's parser refuses the request for it.
 */
export function fieldValueAsRead(name: string, value: string): string | RequestHeadError {
  if (INVALID_FIELD_VALUE.test(value)) {
    const at = INVALID_FIELD_VALUE.exec(value)!.index;
    return {
      code: 'HEADER_INVALID',
      message: `header ${name} holds a control character (U+${hex(value.charCodeAt(at))}): the gateway's HTTP parser refuses the request`,
    };
  }
  const bytes = NON_ASCII.test(value) ? Buffer.from(value, 'utf8').toString('latin1') : value;
  return bytes.replace(OUTER_WHITESPACE, '');
}
