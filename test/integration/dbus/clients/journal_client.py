#!/usr/bin/python3
"""An independent org.vmkeeper1 client (dbus-python), written from docs/dbus-api.md alone.

follow ADDRESS: prints every journaled event once, in sequence order, as JSON lines, across
agent restarts: EventRecorded signals plus ListEventsSince(cursor) whenever the agent (re)appears
or a signal skips a sequence.
race ADDRESS NAME: two writers read the same ResourceVersion and both write with it; prints
which succeeded and the error names of the others.
"""
import json
import signal
import sys

import dbus
import dbus.mainloop.glib
from gi.repository import GLib

BUS_NAME = "org.vmkeeper1"
PATH = "/org/vmkeeper1"
MANAGER = "org.vmkeeper1.Manager"


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def follow(address):
    dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
    bus = dbus.bus.BusConnection(address)
    state = {"cursor": 0}

    def deliver(seq, machine, reason, uid, call):
        if seq <= state["cursor"]:
            return  # already printed: the signal and the listing overlap
        emit({"sequence": int(seq), "machine": str(machine), "reason": str(reason), "uid": str(uid), "call": str(call)})
        state["cursor"] = int(seq)

    def resync():
        try:
            manager = dbus.Interface(bus.get_object(BUS_NAME, PATH, introspect=False), MANAGER)
            while True:
                events, next_cursor = manager.ListEventsSince(dbus.UInt64(state["cursor"]), "")
                for e in events:
                    deliver(int(e[0]), e[2], e[4], e[6], e[7])
                state["cursor"] = max(state["cursor"], int(next_cursor))
                if len(events) < 500:
                    break
            emit({"synced": state["cursor"]})
        except dbus.exceptions.DBusException as err:
            if err.get_dbus_name() == "org.vmkeeper1.Error.EventsExpired":
                state["cursor"] = 0
                resync()
            else:
                emit({"waiting": err.get_dbus_name()})  # the agent is not there yet: NameOwnerChanged will call again

    def on_event(seq, ts, machine, type_, reason, message, uid, call):
        if int(seq) > state["cursor"] + 1:
            resync()  # a gap: fetch what the signal skipped
        deliver(int(seq), machine, reason, uid, call)

    def on_owner(name, old, new):
        if name == BUS_NAME and new:
            resync()

    bus.add_signal_receiver(on_event, signal_name="EventRecorded", dbus_interface=MANAGER, path=PATH)
    bus.add_signal_receiver(on_owner, signal_name="NameOwnerChanged", dbus_interface="org.freedesktop.DBus",
                            bus_name="org.freedesktop.DBus", arg0=BUS_NAME)
    resync()
    loop = GLib.MainLoop()
    GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, signal.SIGTERM, loop.quit)
    loop.run()


def race(address, name):
    writers = [dbus.bus.BusConnection(address) for _ in range(2)]
    path = str(dbus.Interface(writers[0].get_object(BUS_NAME, PATH, introspect=False), MANAGER).GetMachine(name))
    props = dbus.Interface(writers[0].get_object(BUS_NAME, path, introspect=False), "org.freedesktop.DBus.Properties")
    version = int(props.Get("org.vmkeeper1.Machine", "ResourceVersion"))
    outcome = {"version": version, "ok": [], "errors": []}
    for i, bus in enumerate(writers):
        manager = dbus.Interface(bus.get_object(BUS_NAME, PATH, introspect=False), MANAGER)
        try:
            manager.SetMachineAnnotationsIfVersion(name, dbus.Dictionary({"writer": str(i)}, signature="ss"), dbus.UInt64(version))
            outcome["ok"].append(i)
        except dbus.exceptions.DBusException as err:
            outcome["errors"].append({"writer": i, "name": err.get_dbus_name(), "message": err.get_dbus_message()})
    outcome["annotations"] = {str(k): str(v) for k, v in props.Get("org.vmkeeper1.Machine", "Annotations").items()}
    emit(outcome)


if __name__ == "__main__":
    if sys.argv[1] == "follow":
        follow(sys.argv[2])
    elif sys.argv[1] == "race":
        race(sys.argv[2], sys.argv[3])
    else:
        sys.exit("usage: journal_client.py follow ADDRESS | race ADDRESS NAME")
