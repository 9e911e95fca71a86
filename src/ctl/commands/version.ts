import { type Command, writeJson } from '../command.js';
import { toCtlError } from '../errors.js';
import { CTL_VERSION } from '../version.js';

export const versionCommand: Command = {
  name: 'version',
  summary: 'show the versions of vmkeeperctl and of the running vmkeeperd',
  usage: '',
  description: "Prints vmkeeperctl's version, then the agent's Version property and its state.",
  options: [],
  args: { min: 0, max: 0 },
  async run(ctx) {
    if (!ctx.json) ctx.io.out(`vmkeeperctl ${CTL_VERSION}\n`);
    let agent;
    try {
      agent = await (await ctx.client()).managerInfo();
    } catch (err) {
      // The client's version is still useful when the agent cannot be reached.
      if (ctx.json) writeJson(ctx, { client: CTL_VERSION, agent: null });
      throw toCtlError(err);
    }
    if (ctx.json) {
      writeJson(ctx, { client: CTL_VERSION, agent: { version: agent.version, state: agent.state, libvirtUri: agent.libvirtUri, libvirtConnected: agent.libvirtConnected, drainState: agent.drainState } });
    } else {
      const libvirt = `libvirt ${agent.libvirtUri} ${agent.libvirtConnected ? 'connected' : 'disconnected'}`;
      // Said only when drained or draining: a drained host explains machines that do not start.
      const drain = agent.drainState && agent.drainState !== 'none' ? `, ${agent.drainState}` : '';
      ctx.io.out(`vmkeeperd ${agent.version} (${agent.state}${drain}, ${libvirt})\n`);
    }
    return 0;
  },
};
