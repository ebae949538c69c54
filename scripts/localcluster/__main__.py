"""``python -m localcluster up|down|status``: what scripts/cluster-{up,down,status} run."""

from __future__ import annotations

import argparse
import dataclasses
import io
import sys

from localcluster import _config, _lifecycle, _status


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="localcluster",
        description="A local schedd cluster on loopback (configuration: cluster/local.ini, "
        "overridden by SCHEDD_CLUSTER_<KEY> variables).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser(
        "up",
        help="start what is not running, wait until the cluster is whole",
        description="Start the etcd members, the nodes and the workers that are not running "
        "(in the background, pid files and logs in the cluster directory) and wait until "
        "every partition is owned and every worker is connected to every node.",
    )
    up.add_argument(
        "--tls",
        action="store_true",
        help="TLS everywhere (as tls = true in the config): certificates from scripts/dev-ca "
        "in DIR/tls, made if missing; etcd and the nodes require client certificates",
    )
    down = sub.add_parser(
        "down",
        help="stop everything (SIGTERM, then SIGKILL after stop_timeout_s)",
        description="Stop the workers, then the nodes, then etcd: SIGTERM, then SIGKILL to "
        "whatever still runs after stop_timeout_s.",
    )
    down.add_argument(
        "--wipe", action="store_true", help="then delete the cluster directory (data and logs)"
    )
    status = sub.add_parser(
        "status",
        help="members, nodes, partition owners and epochs, workers, clock skew",
        description="Show the etcd members (health, leader), the nodes with their clock skew, "
        "every partition's owner and epoch, and the workers with the nodes they reach. "
        "Exit status 1 when something is wrong (listed last).",
    )
    status.add_argument("-o", "--output", choices=("text", "json"), default="text")
    status.add_argument(
        "--no-skew", action="store_true", help="skip the clock measurement (it takes ~2 s)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # Progress lines as they happen, also when piped (up and down take seconds).
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)
    prog = f"cluster-{args.command}"
    try:
        config = _config.load()
        if args.command == "up" and args.tls:
            config = dataclasses.replace(config, tls=True)
        if args.command == "up":
            _lifecycle.up(config)
            return 0
        if args.command == "down":
            _lifecycle.down(config, wipe=args.wipe)
            return 0
        return _status.status(config, as_json=args.output == "json", measure_skew=not args.no_skew)
    except (_config.ConfigError, _lifecycle.ClusterError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
