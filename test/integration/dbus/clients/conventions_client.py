#!/usr/bin/python3
"""Probes org.vmkeeper1 with dbus-python (libdbus), an independent client: each probe is one raw
call with an explicit signature; prints one JSON object mapping probe -> error name, or "ok:"
plus the reply rendered as text.

usage: conventions_client.py ADDRESS MACHINE_NAME MACHINE_PATH
"""
import json
import sys

import dbus

BUS_NAME = "org.vmkeeper1"
MANAGER_PATH = "/org/vmkeeper1"
MANAGER = "org.vmkeeper1.Manager"
MACHINE = "org.vmkeeper1.Machine"
PROPS = "org.freedesktop.DBus.Properties"


def main(address, machine_name, machine_path):
    bus = dbus.bus.BusConnection(address)

    def call(path, iface, member, signature, args):
        msg = dbus.lowlevel.MethodCallMessage(BUS_NAME, path, iface, member)
        if signature:
            msg.append(*args, signature=signature)
        try:
            reply = bus.send_message_with_reply_and_block(msg, 10000)
            return "ok:" + json.dumps([str(a) if not isinstance(a, (dict, list)) else repr(a) for a in reply.get_args_list()])
        except dbus.exceptions.DBusException as e:
            return e.get_dbus_name()

    probes = {
        "wrong-signature": (MANAGER_PATH, MANAGER, "GetMachine", "u", [42]),
        "unknown-method": (MANAGER_PATH, MANAGER, "NoSuchMethod", "", []),
        "unknown-object": ("/org/vmkeeper1/machine/nope", PROPS, "GetAll", "s", [MACHINE]),
        "getall-unknown-interface": (MANAGER_PATH, PROPS, "GetAll", "s", ["org.example.Nope"]),
        "get-unknown-interface": (MANAGER_PATH, PROPS, "Get", "ss", ["org.example.Nope", "Version"]),
        "get-unknown-property": (MANAGER_PATH, PROPS, "Get", "ss", [MANAGER, "NoSuchProperty"]),
        "set-unknown-property": (MANAGER_PATH, PROPS, "Set", "ssv", [MANAGER, "NoSuchProperty", dbus.String("x", variant_level=1)]),
        "set-read-only": (machine_path, PROPS, "Set", "ssv", [MACHINE, "Name", dbus.String("x", variant_level=1)]),
        "get-known": (machine_path, PROPS, "Get", "ss", [MACHINE, "Name"]),
        "getall-known": (machine_path, PROPS, "GetAll", "s", [MACHINE]),
        "peer-ping": (machine_path, "org.freedesktop.DBus.Peer", "Ping", "", []),
    }
    out = {name: call(*p) for name, p in probes.items()}
    # The structured form beside the JSON one: a{sv} with typed values, no JSON inside.
    manager = bus.get_object(BUS_NAME, MANAGER_PATH)
    described = manager.DescribeMachineStructured(machine_name, dbus_interface=MANAGER)
    out["structured"] = {
        "signature": described.signature,
        "name": str(described["metadata"]["name"]),
        "createdAtType": type(described["metadata"]["createdAt"]).__name__,
        "cpusType": type(described["spec"]["cpus"]).__name__,
        "cpus": int(described["spec"]["cpus"]),
        "hasDeletion": "deletionTimestamp" in described["metadata"],
    }
    sys.stdout.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
