"""Text that streams: a log tailed by offsets, its wrapped rows, and the journal's records."""
