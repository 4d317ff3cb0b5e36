"""A phase's life as the files tell it: the project facade (`project`), the states derived
from the run directories (`state`), the live figures of a run (`livestats`), a stalled run
(`stall`), the notifier (`notify`), a config changed on disk (`reread`), and the snapshot that
the status command and the console both show (`snapshot`). It sits on the runs, the config and
the checks, and under the flow."""
