/**
 * Entity tags of the rules API: a rule's tag is `"<rule version>"`, the snapshot's is
 * `"<rule-set version>"`. Parsing is lenient where it costs nothing: `W/"3"` and a bare `3` count as 3.
 */

/** The strong entity tag of a version: `"3"`. */
export function etagOf(version: number): string {
  return `"${version}"`;
}

/** A parsed `If-Match` / `If-None-Match`: `*`, or the versions its tags name. */
export type TagCondition = { any: true } | { any: false; versions: number[] };

const TAG = /^(?:W\/)?"([^"]*)"$/;

/**
 * Parses a conditional header; `undefined` when absent or empty (no condition). Tags that do not
 * name a version (`"abc"`, garbage) are kept out of `versions`, so they simply never match: a PUT
 * with `If-Match: "abc"` gets 412, as RFC 9110 §13.1.1 says for a tag that matches nothing.
 */
export function parseTagCondition(header: string | string[] | undefined): TagCondition | undefined {
  const value = Array.isArray(header) ? header.join(',') : header;
  if (value === undefined || value.trim() === '') return undefined;
  if (value.trim() === '*') return { any: true };
  const versions: number[] = [];
  for (const part of value.split(',')) {
    const item = part.trim();
    const opaque = TAG.exec(item)?.[1] ?? item;
    if (/^[0-9]{1,15}$/.test(opaque)) versions.push(Number(opaque));
  }
  return { any: false, versions };
}

/** True when the condition accepts `version` (weak comparison: `W/"3"` matches 3). */
export function tagMatches(condition: TagCondition, version: number): boolean {
  return condition.any || condition.versions.includes(version);
}
