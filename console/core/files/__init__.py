"""Files and paths as the core reads and writes them: crash-safe JSON, a log's tail by offset, a
path typed on the command line, the python a phase runs under."""
