"""An agent process of `hpcgym compare`: `python -m hpcgym.gymbridge.compare.agent_process AGENT
--connect ADDRESS --kinds select[,inspect]`; an exception ends it with status 1, its last line the error."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hpcgym-compare-agent")
    parser.add_argument("agent")
    parser.add_argument("--connect", required=True)
    parser.add_argument("--kinds", default="")
    parser.add_argument("--timeout", type=float, default=40.0)
    args = parser.parse_args(argv)

    from ...agents.runtime import load_agent, run_agent, serve_on_one_thread
    from .unit import taking

    try:
        agent = taking(load_agent(args.agent), tuple(k for k in args.kinds.split(",") if k), args.agent)
        serve_on_one_thread()
        run = run_agent(agent, args.connect, name=f"{args.agent}", reset=None, episodes=1, timeout=args.timeout)
    except Exception as exc:  # noqa: BLE001 - the last line is what the comparison reports
        import traceback

        traceback.print_exc()
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    ended = run.episodes[-1]["reason"] if run.episodes else "no episode"
    if ended != "completed":
        print(f"episode ended: {ended}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
