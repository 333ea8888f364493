"""tensortune: an auto-tuner for tensor programs on Apache TVM."""
__version__ = "0.1.0"
