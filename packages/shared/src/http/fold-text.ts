/**
 * Unicode folding for rule matching (SPEC §4, docs/paths.md): the text an upstream that folds Unicode
 * reads. NFKC maps compatibility forms to their plain letters (`ｓ` → `s`, `ﬁ` → `fi`, `é` spelt as
 * `e` + U+0301 → `é`), and default-ignorable code points (zero-width space and joiners, soft hyphen,
 * BOM, variation selectors, Hangul fillers: Unicode's Default_Ignorable_Code_Point) are dropped,
 * because renderers and many servers drop them. They are dropped before NFKC (so they cannot keep two
 * characters from composing) and after it (NFKC turns U+FFA0 into U+1160, itself ignorable).
 */
const DEFAULT_IGNORABLE = /\p{Default_Ignorable_Code_Point}/gu;

/** `text` folded: default-ignorable code points removed, NFKC, removed again. Pure. */
export function foldText(text: string): string {
  return text.replace(DEFAULT_IGNORABLE, '').normalize('NFKC').replace(DEFAULT_IGNORABLE, '');
}
