"""Suite-wide set-up."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

# A suite started where Ctrl-C is ignored (under nohup, or as `cmd &` in a script) passes that on
# to every program it starts, and the Ctrl-C tests would wait out their deadlines on stages that
# never see the interrupt. Restore what a terminal gives; the handler is reset at each exec.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Shared test modules at the suite's top (record_samples.py) import from any folder's tests.
sys.path.insert(0, str(Path(__file__).resolve().parent))
