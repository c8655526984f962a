# Written by make sync-version from NSBOX_VERSION in the Makefile: change it there.
__version__ = "0.5.0"
