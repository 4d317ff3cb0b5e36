"""Live machine readings for the panels: GPUs (NVML), disks, /dev/shm, host."""
