// The plugin is built by its own issue; until then the package holds only its skeleton.
export {};
