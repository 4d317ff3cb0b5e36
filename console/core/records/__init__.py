"""What the console writes down to read back later: the journal of runs, checks, overrides
and stops (`journal`), and the fingerprints of a finished phase's inputs and outputs
(`provenance`). Below the runs and the checks, which write and read them."""
