"""The machine's panels: GPUs, disks, /dev/shm and the host, each fed its source's reading."""
