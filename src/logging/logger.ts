// The logger interface the agent's components take. main.ts builds the winston-backed one;
// tests pass a silent or capturing logger.

export type LogFields = Record<string, unknown>;

export interface Logger {
  error(message: string, fields?: LogFields): void;
  warn(message: string, fields?: LogFields): void;
  info(message: string, fields?: LogFields): void;
  debug(message: string, fields?: LogFields): void;
}

export const silentLogger: Logger = {
  error() {},
  warn() {},
  info() {},
  debug() {},
};
