"""Command line: ``python -m llm_router_devkit.simulator --port 8808 --profile profile.json``.

Command-line values override the profile file, which overrides the built-in default profile.
``--print-default-profile`` writes the default profile as JSON, a starting point for your own.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from llm_router_devkit.simulator.profile import SimulatorProfile


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m llm_router_devkit.simulator",
        description="Serve a simulated Models Backend (/single, /batch, /stats).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8808)
    parser.add_argument("--profile", help="JSON profile file (default: the built-in 10 models)")
    parser.add_argument("--time-scale", type=float, help="divide latencies and windows by this")
    parser.add_argument("--seed", type=int, help="seed of every deterministic draw")
    parser.add_argument("--error-rate", type=float, help="probability of a 500 per call")
    parser.add_argument("--timeout-rate", type=float, help="probability of a hang then 504")
    parser.add_argument("--truncate-rate", type=float,
                        help="probability of a 200 whose JSON body is cut in half")
    parser.add_argument("--slowdown", type=float, help="multiply every latency by this")
    parser.add_argument("--log-level", default="info")
    parser.add_argument(
        "--print-default-profile", action="store_true", help="print the default profile and exit"
    )
    return parser


def load_profile(args: argparse.Namespace) -> SimulatorProfile:
    """The profile from ``--profile`` (or the default) with command-line overrides applied."""
    base = SimulatorProfile.from_file(args.profile) if args.profile else SimulatorProfile.default()
    return base.with_overrides(
        time_scale=args.time_scale,
        seed=args.seed,
        error_rate=args.error_rate,
        timeout_rate=args.timeout_rate,
        truncate_rate=args.truncate_rate,
        slowdown=args.slowdown,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the simulator until interrupted."""
    args = _parser().parse_args(argv)
    if args.print_default_profile:
        sys.stdout.write(SimulatorProfile.default().to_json() + "\n")
        return 0
    import uvicorn

    from llm_router_devkit.simulator.app import create_app

    profile = load_profile(args)
    print(
        f"Models Backend simulator on http://{args.host}:{args.port} "
        f"({len(profile.models)} models, time_scale={profile.time_scale}, seed={profile.seed})",
        flush=True,
    )
    uvicorn.run(
        create_app(profile),
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        access_log=False,
        ws="none",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
