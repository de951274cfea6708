"""`herder supervise`: the process supervisor of hosts without systemd, and `herder daemon-util`."""
