/** Commander parser for a repeatable option: each occurrence appends to the list (no default, so help shows none). */
export function collect(value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), value];
}
