"""The `tidal` command: one entry point over every service, the simulator and the tools."""
