"""HAProxy as Serve starts it on the engage-managed head, with its side listeners on loopback.

Serve's HAProxy config binds its Prometheus exporter (``bind :PORT``) and its read-only
stats page (``bind *:PORT``) on every interface, whatever address the HTTP entry binds
to. The head engage manages keeps everything on loopback unless the deploy names another
address, so Serve runs this in place of the binary (``RAY_SERVE_HAPROXY_BINARY_PATH``
points at a two-line sh script that runs this file, see engage.serve.cluster): it writes
the config with those two bind lines on 127.0.0.1 next to Serve's and ``exec``s the real
binary on it, same process id (Serve follows HAProxy by pid), same arguments otherwise.

Standard library only, run by path: it must start fast and import nothing of engage.
"""

from __future__ import annotations

import os
import re
import sys

REAL_BINARY = "ENGAGE_HAPROXY_BINARY"
SIDE_PORTS = ("RAY_SERVE_HAPROXY_METRICS_PORT", "RAY_SERVE_HAPROXY_STATS_PORT")


def loopback(config: str, ports: list[str]) -> str:
    """``config`` with the ``bind`` lines of ``ports`` on 127.0.0.1 (any other bind kept)."""
    for port in ports:
        config = re.sub(
            rf"^(\s*bind\s+)(?:\*|0\.0\.0\.0|::)?:{re.escape(port)}(?=\s|$)",
            rf"\g<1>127.0.0.1:{port}",
            config,
            flags=re.MULTILINE,
        )
    return config


def main(argv: list[str]) -> None:
    """Rewrite HAProxy's config so its side listeners stay on loopback, then exec HAProxy."""
    binary = os.environ[REAL_BINARY]
    args = list(argv)
    ports = [os.environ[name] for name in SIDE_PORTS if os.environ.get(name)]
    if "-f" in args[:-1]:
        at = args.index("-f") + 1
        with open(args[at]) as f:
            text = f.read()
        path = f"{args[at]}.loopback"
        with open(path, "w") as f:
            f.write(loopback(text, ports))
        args[at] = path
    os.execv(binary, [binary, *args])


if __name__ == "__main__":
    main(sys.argv[1:])
