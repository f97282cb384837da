/** What a command needs from its surroundings; tests and embedders pass their own. */
export interface CliContext {
  /** Where relative paths and the first node_modules search start. */
  readonly cwd: string;
  /** The @metrale/serve package directory: plugins installed beside the CLI are found from here. */
  readonly packageDir: string;
  /** One line to stdout (a newline is added). */
  readonly out: (line: string) => void;
  /** One line to stderr (a newline is added). */
  readonly err: (line: string) => void;
  /** The process exit code a command asks for when it finishes without throwing. */
  exitCode: number;
}
