from .core import run
