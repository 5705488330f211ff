/**
 * Every relative link of the README and of docs/ leads somewhere: the file exists, and an `#anchor`
 * names a heading of the target (GitHub's slugs). A README that points to a section that moved is
 * how a newcomer gets lost first.
 */
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from './rules-api.js';

/** GitHub's heading anchor: lower case, punctuation dropped (but `-` and `_`), spaces to `-`. */
function slugOf(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

/** The anchors of a markdown file: one per heading, repeats numbered `-1`, `-2` as GitHub does. */
function anchorsOf(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const anchors = new Set<string>();
  let fenced = false;
  for (const line of markdown.split('\n')) {
    if (/^\s*```/.test(line)) fenced = !fenced;
    const heading = !fenced && /^#{1,6}\s+(.*)$/.exec(line);
    if (!heading) continue;
    const slug = slugOf(heading[1]!.replace(/`/g, ''));
    const n = seen.get(slug) ?? 0;
    seen.set(slug, n + 1);
    anchors.add(n === 0 ? slug : `${slug}-${n}`);
  }
  return anchors;
}

/** Relative markdown links `[text](target)` outside code fences and inline code. */
function linksOf(markdown: string): string[] {
  const links: string[] = [];
  let fenced = false;
  for (const line of markdown.split('\n')) {
    if (/^\s*```/.test(line)) fenced = !fenced;
    if (fenced) continue;
    const text = line.replace(/`[^`]*`/g, '');
    for (const m of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      const target = m[1]!;
      if (!/^[a-z]+:/i.test(target)) links.push(target);
    }
  }
  return links;
}

function brokenLinks(root: string, files: readonly string[]): string[] {
  const broken: string[] = [];
  for (const file of files) {
    const text = readFileSync(join(root, file), 'utf8');
    for (const link of linksOf(text)) {
      const [path, anchor] = link.split('#') as [string, string | undefined];
      const target = path === '' ? join(root, file) : join(root, dirname(file), decodeURI(path));
      if (!existsSync(target)) {
        broken.push(`${file}: ${link} (no such file)`);
        continue;
      }
      if (
        anchor !== undefined &&
        target.endsWith('.md') &&
        !anchorsOf(readFileSync(target, 'utf8')).has(anchor)
      ) {
        broken.push(`${file}: ${link} (no such heading)`);
      }
    }
  }
  return broken;
}

const DOCS = [
  'README.md',
  ...readdirSync(join(REPO_ROOT, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => `docs/${name}`),
  ...['gateway', 'rules-api'].map((app) => `apps/${app}/README.md`),
];

describe('links of the README and docs/', () => {
  it('every relative link names a file that exists and a heading it has', () => {
    expect(DOCS.length).toBeGreaterThan(10);
    expect(brokenLinks(REPO_ROOT, DOCS)).toEqual([]);
  });

  it('reports a missing file and a missing heading, and passes a good link', () => {
    const root = mkdtempSync(join(tmpdir(), 'sluice-links-'));
    try {
      mkdirSync(join(root, 'docs'));
      writeFileSync(
        join(root, 'docs/guide.md'),
        '# Guide\n\n## Sluice behind Envoy: the `rate_limit` filter\n',
      );
      writeFileSync(
        join(root, 'README.md'),
        [
          '[good](docs/guide.md#sluice-behind-envoy-the-rate_limit-filter)',
          '[no file](docs/nope.md)',
          '[no heading](docs/guide.md#layout)',
          '`[in code](docs/ignored.md)`',
          '[web](https://example.org/x)',
        ].join('\n'),
      );
      expect(brokenLinks(root, ['README.md', 'docs/guide.md'])).toEqual([
        'README.md: docs/nope.md (no such file)',
        'README.md: docs/guide.md#layout (no such heading)',
      ]);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});
