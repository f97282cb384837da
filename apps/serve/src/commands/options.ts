/** Commander parser for a repeatable option: each occurrence appends to the list. */
export function collect(value: string, previous: string[]): string[] {
  return [...previous, value];
}
