"""kernlog: a kernel worklog that profiles every revision under ncu and logs the deltas."""

__version__ = "0.1.0"
