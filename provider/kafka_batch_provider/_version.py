"""The release's version: the package's, the wheel's (setup.cfg reads it) and the changelog's newest entry."""

__version__ = "1.0.0"
