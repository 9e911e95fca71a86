// ANSI colour, only for a terminal and never when NO_COLOR is set (https://no-color.org).

export interface Styles {
  enabled: boolean;
  bold(s: string): string;
  dim(s: string): string;
  red(s: string): string;
  green(s: string): string;
  yellow(s: string): string;
}

export function useColor(isTTY: boolean, env: NodeJS.ProcessEnv): boolean {
  if (!isTTY) return false;
  if (env.NO_COLOR !== undefined && env.NO_COLOR !== '') return false;
  return env.TERM !== 'dumb';
}

export function styles(enabled: boolean): Styles {
  const wrap = (open: number, close: number) => (s: string) => (enabled ? `\x1b[${open}m${s}\x1b[${close}m` : s);
  return { enabled, bold: wrap(1, 22), dim: wrap(2, 22), red: wrap(31, 39), green: wrap(32, 39), yellow: wrap(33, 39) };
}

/** The colour a machine state is shown in. */
export function stateStyle(st: Styles, state: string): (s: string) => string {
  switch (state) {
    case 'running':
      return st.green;
    case 'error':
      return st.red;
    case 'stopping':
    case 'terminating':
    case 'terminated':
    case 'pending':
      return st.yellow;
    default:
      return (s) => s;
  }
}

export function eventTypeStyle(st: Styles, type: string): (s: string) => string {
  return type === 'warning' ? st.yellow : (s) => s;
}
