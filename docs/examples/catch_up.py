"""An app's backend catching up on presence from the broker's log (docs/history.md).

`catch_up` reads every transition after `cursor` and hands each record to `write` (which must be idempotent: a
crash between `write` and saving the cursor sends some again). When the log cannot continue from the cursor it
takes the offset `ping` reports, reads the current state of `users`, and continues from that offset. Returns the new cursor
and log epoch, for the caller to keep in its own database.
"""

from typing import Any, Callable, Dict, Iterable, Optional, Tuple

from rollcall import Broker, BrokerError


def catch_up(
    broker: Broker,
    cursor: int,
    epoch: Optional[str],
    users: Iterable[str],
    write: Callable[[Dict[str, Any]], None],
) -> Tuple[int, str]:
    while True:
        try:
            page = broker.request("events", after=cursor, log_epoch=epoch, limit=1000)
        except BrokerError as refused:
            if refused.code != "snapshot_required":
                raise
            ping = broker.ping()  # where the log stands first...
            for record in broker.query(*users).values():  # ...then the state, as new or newer
                write(record)
            cursor, epoch = ping["offset"], ping["log_epoch"]  # what came between comes again: harmless
            continue
        for event in page["events"]:
            write(event["record"])
            cursor = event["offset"]
        epoch = page["log_epoch"]
        if "next" not in page:
            return cursor, epoch
