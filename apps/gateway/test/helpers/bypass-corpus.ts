/**
 * Spellings of `/admin/...` a client might use to slip past a `/admin/**` rule, with what the gateway
 * answers once the rule's one token is spent: 429 (counted against the rule) or 400 (refused: it
 * cannot be normalised safely). bypass.int.test.ts sends them to a gateway; the explain agreement
 * test sends them to both a gateway and explain.
 */
/** [request-target as sent, expected status] */
export const BYPASS_CORPUS: ReadonlyArray<readonly [string, 400 | 429]> = [
  ['/admin', 429],
  ['/admin/', 429],
  ['/admin/x', 429],
  ['/admin/x?next=/public', 429],
  ['//admin/x', 429],
  ['///admin///x', 429],
  ['/admin//x', 429],
  ['/./admin/x', 429],
  ['/./././admin', 429],
  ['/admin/./x', 429],
  ['/public/../admin/x', 429],
  ['/x/y/../../admin/z', 429],
  ['/admin/x/..', 429],
  ['/admin/%2e%2e/admin/x', 429],
  ['/%61dmin/x', 429],
  ['/adm%69n/x', 429],
  ['/%61%64%6D%69%6E/x', 429],
  ['/%2e/admin/x', 429],
  ['/x/%2e%2e/admin/x', 429],
  ['/x/%2E%2E/admin/x', 429],
  ['/x/.%2e/admin/x', 429],
  ['/x/%2e./admin', 429],
  ['/%2e%2e/admin', 400],
  ['/../admin', 400],
  ['/admin%2Fx', 400],
  ['/admin%2fx', 400],
  ['/x/..%2Fadmin', 400],
  ['/%2e%2e%2fadmin', 400],
  ['/admin\\x', 400],
  ['/x/..\\admin', 400],
  ['/x/%5C../admin', 400],
  ['/admin/x%00', 400],
  ['/admin%00/x', 400],
  ['/admin%09/x', 400],
  ['/admin\u0000x', 400],
  ['/admin/x#frag', 400],
  ['/admin%ZZ/x', 400],
  ['/%u0061dmin/x', 400],
  ['/admin%', 400],
  ['http://evil.example/admin/x', 400],
  ['HTTP://127.0.0.1/./admin/x', 400],
  ['*', 400],
  // spellings that some upstreams read as /admin (docs/paths.md): refused rather than guessed at
  ['/admin;x=1', 400],
  ['/admin;/x', 400],
  ['/admin%3Bx=1/x', 400],
  ['/admin./x', 400],
  ['/admin%2e/x', 400],
  ['/admin%20/x', 400],
  ['/foo/%252e%252e/admin/x', 400],
  ['/%2561dmin/x', 400],
  ['/foo/%EF%BC%8E%EF%BC%8E/admin/x', 400],
  ['/admin%EF%BC%8Fx', 400],
  ['/%C0%AE%C0%AE/admin/x', 400],
  // fullwidth letters and zero-width characters: upstreams that fold Unicode (NFKC) read /admin, and
  // rules see the path folded too (SPEC §4). Percent-encoded: the corpus goes out as latin1 bytes.
  ['/%EF%BD%81dmin/x', 429], // ａdmin
  ['/%EF%BD%81%EF%BD%84%EF%BD%8D%EF%BD%89%EF%BD%8E/x', 429], // ａｄｍｉｎ
  ['/%ef%bd%81dmin/x', 429],
  ['/ad%E2%80%8Bmin/x', 429], // zero-width space
  ['/%E2%80%8Badmin/x', 429],
  ['/admin%E2%80%8B/x', 429],
  ['/admin/%E2%80%8B', 429],
  ['/ad%E2%80%8Dmin/x', 429], // zero-width joiner
  ['/ad%C2%ADmin/x', 429], // soft hyphen
  ['/%EF%BB%BFadmin/x', 429], // byte order mark
  ['/adm%E2%81%A0in/x', 429], // word joiner
  ['/x/..%E2%80%8B/admin/x', 400], // `..` once the zero-width space is gone: a `..`-prefixed name is refused
  ['/..%E2%80%8B/admin', 400],
  ['/admin/.%E2%80%8B/x', 429], // `.` once folded
  ['/x/..admin/x', 400],
  ['/%EF%BC%8561dmin/x', 400], // `％61` folds to the escape `%61`
  ['/admin%EF%BC%9Bx=1/x', 400], // `；` folds to `;`
];
