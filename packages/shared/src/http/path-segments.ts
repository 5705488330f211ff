/**
 * Splits a path that `normalizePath` produced into segments for rule matching:
 * '/' -> [], '/a/b' -> ['a', 'b'], '/a/b/' -> ['a', 'b'].
 *
 * A single trailing slash is ignored so that `/orders/` cannot slip past a rule on `/orders`. The input
 * must already be normalised (no `//`, `.` or `..` segments); this function does not check it again.
 */
export function pathSegments(path: string): string[] {
  const end = path.length > 1 && path.charCodeAt(path.length - 1) === 0x2f ? path.length - 1 : path.length;
  if (end <= 1) return [];
  return path.slice(1, end).split('/');
}
