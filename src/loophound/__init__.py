"""loophound: forensics for runaway AI-agent loops."""

__version__ = "0.1.0"
