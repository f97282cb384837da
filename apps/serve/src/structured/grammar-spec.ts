/**
 * What a request's output must follow, as the HTTP thread sends it to the engine worker (which
 * compiles it with xgrammar): plain data, so it crosses the thread boundary and keys the cache of
 * compiled grammars by its text.
 */
export type GrammarSpec =
  /** Any JSON object (`response_format: {"type": "json_object"}`). */
  | { readonly kind: 'json_object' }
  /** A JSON document valid against `schema` (JSON text), no properties beyond the schema's. */
  | { readonly kind: 'json_schema'; readonly schema: string }
  /** An xgrammar structural tag (JSON text): forced tool calls in the model's own format. */
  | { readonly kind: 'structural_tag'; readonly tag: string };

/** The cache key of a spec: equal text, one compiled grammar. */
export function grammarKey(spec: GrammarSpec): string {
  switch (spec.kind) {
    case 'json_object':
      return 'json_object';
    case 'json_schema':
      return `json_schema:${spec.schema}`;
    case 'structural_tag':
      return `structural_tag:${spec.tag}`;
  }
}
