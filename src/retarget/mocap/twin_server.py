"""A simulated Motive: the running twin's bodies streamed over NatNet, for the mocap node's ``natnet`` source.

``python -m retarget.mocap.twin_server --channel PATH --command-port P --data-port Q [--rate HZ]
[--position-noise M] [--seed S] [--latency S]`` waits for the twin simulation's pose channel
(:mod:`retarget.twin.channel`), then answers NatNet commands on ``127.0.0.1:P`` (:class:`NatNetServer`: server
info, model definitions naming the channel's bodies, echo, keep-alive) and sends each frame of
:class:`~retarget.mocap.twin.LiveTwinSource` (the simulated bodies at ``--rate`` in simulation time, with seeded
Gaussian position noise) to every connected client's data port ``Q`` (unicast). The frames carry the capture's
latency as camera and transmit ticks, so the client stamps each pose with the simulation instant it belongs to.
``retarget up --twin reduced --mocap natnet`` on the emulated bus starts it and points the mocap node at it: the
whole receive path (sockets, version negotiation, names, latency) runs as it does against Motive. SIGINT/SIGTERM
end it (exit 0).
"""
from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main"]


def _log(line: str) -> None:
    print(f"twin natnet: {line}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    """Wait for the channel, then serve NatNet until a stop signal."""
    from retarget.mocap.server import NatNetServer, default_server_info, frame_of_data, model_definitions_for
    from retarget.mocap.twin import LiveTwinSource, TwinNoise
    from retarget.twin.channel import PoseRingReader

    stop: list[int] = []
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, lambda signum, _f: stop.append(signum))
    channel = Path(args.channel)
    reader = PoseRingReader(channel)
    while not stop and not reader.bodies:  # the worker creates the channel once its model is loaded
        reader.poll()
        time.sleep(0.1)
    if stop:
        return 0
    ids = {name: k + 1 for k, name in enumerate(reader.bodies)}
    source = LiveTwinSource(channel, args.rate, TwinNoise(args.position_noise, 0.0, 0.0, args.latency), seed=args.seed,
                            log=_log)
    server = NatNetServer(default_server_info(args.data_port), model_definitions_for({i: n for n, i in ids.items()}),
                          "127.0.0.1", args.command_port).start()
    _log(f"serving bodies {list(ids)} on 127.0.0.1:{args.command_port} (data to port {args.data_port}), "
         f"{args.rate:g} Hz, noise {args.position_noise:g} m")
    sent = 0
    try:
        while not stop:
            frame = source.receive(0.1)
            if frame is None:
                continue
            server.send_frame(frame_of_data(frame, ids))
            sent += 1
    finally:
        server.stop()
        source.close()
        _log(f"stopped after {sent} frames")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m retarget.mocap.twin_server``."""
    parser = argparse.ArgumentParser(prog="python -m retarget.mocap.twin_server",
                                     description="Stream the twin simulation's bodies over NatNet (a simulated "
                                     "Motive on loopback).")
    parser.add_argument("--channel", required=True, help="the twin's pose channel file")
    parser.add_argument("--command-port", type=int, required=True, help="NatNet command port to answer on")
    parser.add_argument("--data-port", type=int, required=True, help="clients' data port frames are sent to")
    parser.add_argument("--rate", type=float, default=120.0, help="capture rate [Hz] (default 120)")
    parser.add_argument("--position-noise", type=float, default=0.0005, help="Gaussian noise per position "
                        "coordinate [m] (default 0.0005)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the noise (default 0)")
    parser.add_argument("--latency", type=float, default=0.005, help="capture latency [s] (default 0.005)")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
