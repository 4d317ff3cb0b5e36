"""Suite-wide set-up."""

from __future__ import annotations

import signal

# A suite started where Ctrl-C is ignored (under nohup, or as `cmd &` in a script) passes that on
# to every program it starts, and the Ctrl-C tests would wait out their deadlines on stages that
# never see the interrupt. Restore what a terminal gives; the handler is reset at each exec.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
