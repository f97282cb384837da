/**
 * One recorded unit of device work. A leaf runs; a child graph (a graph launched into a capturing
 * stream) holds the nodes of that graph as they were when it was captured.
 */
export type GraphNode =
  | { readonly label: string; readonly run: (call: string) => void }
  | { readonly label: string; readonly children: readonly GraphNode[] };

/** Runs nodes in order; `onLeaf` is told of each leaf run (for the replay counters). */
export function runNodes(nodes: readonly GraphNode[], call: string, onLeaf: () => void): void {
  for (let i = 0; i < nodes.length; i++) {
    const node = nodes[i]!;
    // Errors name the node, so a fault in a replay points at the captured call that made it.
    const where = `${call} node ${i} (${node.label})`;
    if ('children' in node) {
      runNodes(node.children, where, onLeaf);
    } else {
      node.run(where);
      onLeaf();
    }
  }
}
