"""The tdsl version: its own module so that the runtime's disk cache can key on it without
importing the package facade."""
__version__ = "0.1.0"
