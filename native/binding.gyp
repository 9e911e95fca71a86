{
  "targets": [
    {
      "target_name": "domain_events",
      "sources": ["domain-events.c"],
      "cflags": ["-Wall", "-Wextra", "-Wno-unused-parameter"],
      "include_dirs": ["<!@(pkg-config --cflags-only-I libvirt | sed 's/-I//g')"],
      "libraries": ["<!@(pkg-config --libs libvirt)", "-lpthread"],
      "ldflags": ["-Wl,-z,nodelete"]
    }
  ]
}
